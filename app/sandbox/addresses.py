"""Which IP addresses the sandbox's egress may never reach.

Anything that is not a globally routed unicast address: loopback
(127.0.0.0/8, ::1), RFC 1918 and other private ranges, link-local
(169.254.0.0/16 with the cloud metadata service, fe80::/10), CGNAT
(100.64.0.0/10), multicast, unspecified, reserved and documentation ranges,
IPv6 unique-local (fc00::/7). IPv6 forms that carry an IPv4 address
(IPv4-mapped, 6to4, Teredo, NAT64 ``64:ff9b::/96``) are judged by that
IPv4 address too, so ``::ffff:127.0.0.1`` is loopback.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def forbidden(address: str) -> str | None:
    """Why ``address`` may not be reached from the sandbox, or ``None``."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    for candidate in _forms(ip):
        reason = _reason(candidate)
        if reason is not None:
            return reason
    return None


def _forms(ip: IPAddress) -> list[IPAddress]:
    forms: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = [ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None]
        if ip in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        forms += [v4 for v4 in embedded if v4 is not None]
    return forms


def _reason(ip: IPAddress) -> str | None:
    checks = (
        (ip.is_loopback, "loopback"),
        (ip.is_unspecified, "unspecified"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (ip.is_private, "private"),
        (ip.is_reserved, "reserved"),
        (not ip.is_global, "not globally routed"),
    )
    for hit, reason in checks:
        if hit:
            return reason
    return None

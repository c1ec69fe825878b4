"""Check ``X-Hub-Signature-256``: HMAC-SHA256 of the raw body with the webhook secret.

The check runs on the exact bytes received, before any parsing, and compares
in constant time. The result is a value, not an exception, so the web layer
can answer 401 and still log why without a try/except around every request.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re

_PREFIX = "sha256="
# GitHub sends lowercase hex; accept either case rather than reject a proxy's rewrite.
_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")


class SignatureCheck(enum.Enum):
    VALID = "valid"
    #: No header at all (a delivery without a secret, or not from GitHub).
    MISSING = "missing"
    #: A header that is not ``sha256=<64 hex digits>``.
    MALFORMED = "malformed"
    #: Well formed but computed with another secret or over other bytes.
    MISMATCH = "mismatch"
    #: We have no secret configured: nothing can be verified, so nothing is accepted.
    UNCONFIGURED = "unconfigured"

    @property
    def ok(self) -> bool:
        return self is SignatureCheck.VALID


def _key(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def sign(body: bytes, secret: str | bytes) -> str:
    """The header value GitHub would send for ``body`` (used by tests and the emulator)."""
    digest = hmac.new(_key(secret), body, hashlib.sha256).hexdigest()
    return _PREFIX + digest


def verify(body: bytes, header: str | None, secret: str | bytes) -> SignatureCheck:
    """Verify ``header`` (the ``X-Hub-Signature-256`` value) against ``body``."""
    if not secret:
        return SignatureCheck.UNCONFIGURED
    if header is None or header == "":
        return SignatureCheck.MISSING
    match = _SIGNATURE.fullmatch(header.strip())
    if match is None:
        return SignatureCheck.MALFORMED
    expected = hmac.new(_key(secret), body, hashlib.sha256).digest()
    received = bytes.fromhex(match.group(1))
    if hmac.compare_digest(expected, received):
        return SignatureCheck.VALID
    return SignatureCheck.MISMATCH

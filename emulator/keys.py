"""An App's key pair for scripting the emulator: ``create_app`` takes the
public half, a ``GitHubClientFactory`` signs its JWTs with the private one."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def app_key_pair() -> tuple[str, str]:
    """A fresh 2048-bit RSA key: ``(private PKCS#8 PEM, public PEM)``."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public

from __future__ import annotations

import hashlib
import hmac

from hypothesis import given
from hypothesis import strategies as st

from app.webhooks.signature import SignatureCheck, sign, verify

SECRET = "It's a Secret to Everybody"
BODY = b"Hello, World!"


def test_github_documented_example() -> None:
    # The worked example from GitHub's "Validating webhook deliveries" page.
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sign(BODY, SECRET) == expected
    assert verify(BODY, expected, SECRET) is SignatureCheck.VALID


def test_uppercase_hex_is_accepted() -> None:
    header = "sha256=" + sign(BODY, SECRET).removeprefix("sha256=").upper()
    assert verify(BODY, header, SECRET).ok


def test_other_body_or_secret_is_a_mismatch() -> None:
    header = sign(BODY, SECRET)
    assert verify(BODY + b" ", header, SECRET) is SignatureCheck.MISMATCH
    assert verify(BODY, header, "another secret") is SignatureCheck.MISMATCH


def test_missing_and_malformed_headers() -> None:
    assert verify(BODY, None, SECRET) is SignatureCheck.MISSING
    assert verify(BODY, "", SECRET) is SignatureCheck.MISSING
    sha1 = "sha1=" + hmac.new(SECRET.encode(), BODY, hashlib.sha1).hexdigest()
    for header in (sha1, "sha256=abc", "sha256=" + "g" * 64, "sha256=é" + "0" * 63):
        assert verify(BODY, header, SECRET) is SignatureCheck.MALFORMED, header


def test_no_configured_secret_accepts_nothing() -> None:
    assert verify(BODY, sign(BODY, ""), "") is SignatureCheck.UNCONFIGURED
    assert not SignatureCheck.UNCONFIGURED.ok


@given(body=st.binary(), secret=st.text(min_size=1), header=st.text())
def test_verify_never_raises_and_only_the_right_signature_passes(
    body: bytes, secret: str, header: str
) -> None:
    assert verify(body, sign(body, secret), secret).ok
    if verify(body, header, secret).ok:
        assert header.strip().lower() == sign(body, secret)

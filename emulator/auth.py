"""Who is calling, and what may they do: GitHub's three kinds of credentials.

- App JWT (``Authorization: Bearer <jwt>``): RS256, signed with the app's
  private key, ``iss`` = app id, ``iat``/``exp`` checked, lifetime at most ten
  minutes (GitHub's limit). Only good for the ``/app...`` endpoints.
- Installation token (``token ghs_...`` or ``Bearer ghs_...``, and as the git
  password with user ``x-access-token``): expires, scoped to the installation's
  repositories and permissions.
- User token (``ghu_...``): a scripted human; acts with the user's repository role.

Sans-I/O: functions take the store and header values and return a principal or
raise :class:`AuthError` carrying GitHub's status and message.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from emulator.state import LEVEL_RANK, ROLE_RANK, App, Installation, Repo, Store, Token, User

#: GitHub rejects JWTs whose lifetime (exp - iat) exceeds ten minutes.
MAX_JWT_LIFETIME = 600
#: Tolerated clock drift for ``iat`` in the future, as GitHub recommends backdating by 60 s.
CLOCK_SKEW = 60


IAT_MESSAGE = (
    "'Issued at' claim ('iat') must be an Integer representing the time"
    " that the assertion was issued"
)
EXP_MESSAGE = (
    "'Expiration time' claim ('exp') must be a numeric value representing the future time"
    " at which the assertion expires"
)


class AuthError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Principal:
    kind: Literal["app", "installation", "user", "anonymous"]
    app: App | None = None
    installation: Installation | None = None
    token: Token | None = None
    user: User | None = None

    @property
    def label(self) -> str:
        """Stable identity for rate-limit accounting."""
        if self.kind == "app" and self.app:
            return f"app:{self.app.id}"
        if self.kind == "installation" and self.installation:
            return f"installation:{self.installation.id}"
        if self.user:
            return f"user:{self.user.login}"
        return "anonymous"


def _b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def verify_jwt(store: Store, raw: str) -> App:
    """The app that signed ``raw``; raises AuthError(401) on any defect."""
    undecodable = AuthError(401, "A JSON web token could not be decoded")
    try:
        header_b64, payload_b64, sig_b64 = raw.split(".")
        header = json.loads(_b64decode(header_b64))
        claims = json.loads(_b64decode(payload_b64))
        signature = _b64decode(sig_b64)
    except (ValueError, binascii.Error):
        raise undecodable from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise undecodable
    if header.get("alg") != "RS256":
        raise undecodable
    try:
        app = store.apps.get(int(claims.get("iss", "")))
    except (TypeError, ValueError):
        app = None
    if app is None:
        raise AuthError(401, "'Issuer' claim ('iss') must be an Integer")
    try:
        app.public_key.verify(
            signature,
            f"{header_b64}.{payload_b64}".encode(),
            padding.PKCS1v15(),
            hashes.SHA256(),
        )
    except InvalidSignature:
        raise AuthError(
            401, "A JSON web token could not be decoded"
        ) from None  # GitHub does not reveal which key it expected
    _check_times(store, claims)
    return app


def _check_times(store: Store, claims: dict[str, Any]) -> None:
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(iat, int | float):
        raise AuthError(401, IAT_MESSAGE)
    if not isinstance(exp, int | float):
        raise AuthError(401, EXP_MESSAGE)
    now = store.now().timestamp()
    if iat > now + CLOCK_SKEW:
        raise AuthError(401, IAT_MESSAGE)
    if exp <= now:
        raise AuthError(401, EXP_MESSAGE)
    if exp - iat > MAX_JWT_LIFETIME:
        raise AuthError(401, "'Expiration time' claim ('exp') is too far in the future")


def token_principal(store: Store, value: str) -> Principal:
    """The principal behind an installation or user token; 401 when unknown or expired."""
    token = store.tokens.get(value)
    if token is None:
        raise AuthError(401, "Bad credentials")
    if token.expires_at is not None and token.expires_at <= store.now():
        raise AuthError(401, "Bad credentials")
    if token.kind == "installation":
        inst = store.installations.get(token.installation_id or -1)
        if inst is None:
            raise AuthError(401, "Bad credentials")
        if inst.suspended_at is not None:
            raise AuthError(403, "This installation has been suspended")
        return Principal(
            "installation", installation=inst, token=token, app=store.apps[inst.app_id]
        )
    user = store.user(token.user_login or "")
    if user is None:
        raise AuthError(401, "Bad credentials")
    return Principal("user", token=token, user=user)


def authenticate(store: Store, authorization: str | None) -> Principal:
    """Resolve an ``Authorization`` header. JWTs are told apart by their shape."""
    if not authorization:
        return Principal("anonymous")
    scheme, _, credential = authorization.strip().partition(" ")
    credential = credential.strip()
    if scheme.lower() not in ("bearer", "token") or not credential:
        raise AuthError(401, "Bad credentials")
    if credential.count(".") == 2:
        return Principal("app", app=verify_jwt(store, credential))
    return token_principal(store, credential)


# -- access ----------------------------------------------------------------------


def can_see(store: Store, principal: Principal, repo: Repo) -> bool:
    if principal.kind == "installation":
        return _installation_covers(principal, repo)
    if principal.kind == "user" and principal.user:
        return not repo.private or ROLE_RANK[repo.role_of(principal.user.login)] >= 1
    return not repo.private


def _installation_covers(principal: Principal, repo: Repo) -> bool:
    inst, token = principal.installation, principal.token
    if inst is None or inst.account.id != repo.owner.id:
        return False
    if inst.repo_ids is not None and repo.id not in inst.repo_ids:
        return False
    return not (token and token.repo_ids is not None and repo.id not in token.repo_ids)


def installation_level(principal: Principal, permission: str) -> int:
    """The level an installation token holds for ``permission`` (token narrowing applied)."""
    assert principal.installation is not None
    granted = principal.installation.permissions.get(permission, "none")
    if principal.token and principal.token.permissions:
        narrowed = principal.token.permissions.get(permission, "none")
        granted = min(granted, narrowed, key=lambda level: LEVEL_RANK.get(level, 0))
    return LEVEL_RANK.get(granted, 0)


def may(principal: Principal, repo: Repo, *, permission: str, level: str, role: str) -> bool:
    """Whether ``principal`` may act: installations by permission, users by role."""
    if principal.kind == "installation":
        return installation_level(principal, permission) >= LEVEL_RANK[level]
    if principal.kind == "user" and principal.user:
        return ROLE_RANK[repo.role_of(principal.user.login)] >= ROLE_RANK[role]
    return False

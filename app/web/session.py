"""Session cookies: who signed in, their GitHub user token and their CSRF token.

The cookie is a Fernet token (AES-128-CBC plus HMAC-SHA256, from
``cryptography``): signed so it cannot be forged or altered, encrypted because
it carries the user's GitHub token, and timestamped so it expires on its own.
Any web process can read any cookie. What is kept server side is only the
sessions that were signed out (app/web/signouts.py): a copy of the cookie
taken before sign-out is refused after it. The key is derived from
``REPAIRBOT_SESSION_SECRET`` with HKDF, one key per purpose.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from dataclasses import asdict, dataclass

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SESSION_COOKIE = "repairbot_session"
#: Holds the OAuth ``state`` between the redirect to GitHub and the callback.
LOGIN_COOKIE = "repairbot_login"
#: The sign-in round trip through GitHub must finish within this many seconds.
LOGIN_TTL = 600


@dataclass(frozen=True)
class Session:
    login: str
    user_id: int
    #: The user's token from the App's user authorization: asks GitHub what they may see.
    github_token: str
    #: Sent back with every form; a request without it changes nothing.
    csrf: str
    issued_at: float
    #: Names this sign-in server side: signing out records it as ended.
    sid: str

    @classmethod
    def start(cls, login: str, user_id: int, github_token: str) -> Session:
        return cls(
            login,
            user_id,
            github_token,
            secrets.token_urlsafe(32),
            time.time(),
            secrets.token_urlsafe(32),
        )


def _fernet(secret: str, purpose: bytes) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(
        secret.encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


class SessionCodec:
    def __init__(self, secret: str, *, max_age: float) -> None:
        self._session = _fernet(secret, b"repairbot session v1")
        self._login = _fernet(secret, b"repairbot login state v1")
        self.max_age = max_age

    def dump(self, session: Session) -> str:
        return self._session.encrypt(json.dumps(asdict(session)).encode()).decode()

    def load(self, cookie: str | None) -> Session | None:
        """The session, or None if absent, altered, expired or from another key."""
        if not cookie:
            return None
        try:
            raw = self._session.decrypt(cookie.encode(), ttl=int(self.max_age))
            return Session(**json.loads(raw))
        except (InvalidToken, ValueError, TypeError):
            return None

    def dump_login(self, state: str, next_path: str) -> str:
        return self._login.encrypt(json.dumps([state, next_path]).encode()).decode()

    def load_login(self, cookie: str | None) -> tuple[str, str] | None:
        if not cookie:
            return None
        try:
            state, next_path = json.loads(self._login.decrypt(cookie.encode(), ttl=LOGIN_TTL))
        except (InvalidToken, ValueError, TypeError):
            return None
        return str(state), str(next_path)

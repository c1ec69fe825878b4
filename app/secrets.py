"""Keeping the worker's secrets out of reach of everything it starts.

A secret in a process's environment is readable by its children (they
inherit it), by anything that can read ``/proc/<pid>/environ``, and ends up
in core dumps. So:

- a process reads its secrets once, at start-up, into
  :class:`~app.config.Settings` (:func:`receive` then ``Settings.from_env``);
- then :func:`lock_down` removes them from ``os.environ`` and marks the
  process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``: no core dumps, no
  ptrace by same-uid processes, ``/proc/<pid>/environ`` and ``mem`` owned by
  root);
- a process that starts a worker hands the secrets over through an
  inherited descriptor (:func:`handover`: an anonymous, unlinked memory file
  holding JSON), never through the child's environment or a command line;
- every secret value the worker holds is collected in :class:`KnownSecrets`,
  which redacts them from what agents produce and finds them in proposals.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, MutableMapping

#: Environment variables that hold secrets (agent API keys are named at run time).
SECRET_NAMES = (
    "GITHUB_PRIVATE_KEY",
    "GITHUB_PRIVATE_KEY_FILE",
    "GITHUB_WEBHOOK_SECRET",
    "DATABASE_URL",
    "REDIS_URL",
)
#: Names the descriptor a parent handed secrets over through.
SECRETS_FD = "REPAIRBOT_SECRETS_FD"
_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4


class SecretsError(ValueError):
    """The handed-over secrets cannot be read."""


def handover(secrets: Mapping[str, str]) -> tuple[int, dict[str, str]]:
    """A descriptor holding ``secrets`` for a child, and the environment naming it.

    Pass the descriptor in ``pass_fds`` and close it once the child started.
    """
    fd = os.memfd_create("repairbot-secrets", 0)  # no MFD_CLOEXEC: the child inherits it
    try:
        os.write(fd, json.dumps(dict(secrets)).encode())
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd, {SECRETS_FD: str(fd)}


def receive(environ: MutableMapping[str, str]) -> dict[str, str]:
    """The secrets a parent handed over (empty when none), read once; the
    descriptor is closed so nothing started later inherits it."""
    raw = environ.pop(SECRETS_FD, "")
    if not raw:
        return {}
    try:
        fd = int(raw)
        with os.fdopen(fd, "rb") as fh:
            data = json.loads(fh.read())
    except (ValueError, OSError) as exc:
        raise SecretsError(f"{SECRETS_FD} does not name readable secrets: {exc}") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise SecretsError(f"{SECRETS_FD} must hold a JSON object of strings")
    return data


def lock_down(environ: MutableMapping[str, str], names: Iterable[str] = ()) -> bool:
    """Remove secrets from ``environ`` and make this process non-dumpable.

    ``unsetenv`` only drops libc's pointer: the original bytes stay in the
    block the kernel shows as ``/proc/<pid>/environ``, so the values are
    overwritten there too. Returns whether the process is now non-dumpable.
    """
    wanted = {*SECRET_NAMES, SECRETS_FD, *names}
    for name in wanted:
        environ.pop(name, None)
    wipe_initial_environment(wanted)
    return set_non_dumpable()


def wipe_initial_environment(names: Iterable[str]) -> int:
    """Zero the values of ``names`` in the environment block this process was
    started with (``/proc/self/stat`` fields 50-51); returns how many."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[50 - 3]), int(fields[51 - 3])
    except (OSError, IndexError, ValueError):
        return 0
    if not 0 < start < end:
        return 0
    block = ctypes.string_at(start, end - start)
    prefixes = [f"{name}=".encode() for name in names]
    wiped = offset = 0
    for entry in block.split(b"\0"):
        for prefix in prefixes:
            if entry.startswith(prefix) and len(entry) > len(prefix):
                ctypes.memset(start + offset + len(prefix), 0, len(entry) - len(prefix))
                wiped += 1
        offset += len(entry) + 1
    return wiped


def _libc() -> ctypes.CDLL | None:
    path = ctypes.util.find_library("c")
    return None if path is None else ctypes.CDLL(path, use_errno=True)


def set_non_dumpable() -> bool:
    libc = _libc()
    return libc is not None and libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def is_dumpable() -> bool:
    libc = _libc()
    return libc is None or bool(libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0))


#: Shapes of well-known credentials, redacted even when this worker does not
#: hold the value (a token the agent found elsewhere, a proxy token of
#: another attempt).
TOKEN_SHAPES = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|"
    r"sk-(?:ant-)?[A-Za-z0-9_-]{16,}|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|"
    r"rbp-[A-Za-z0-9_-]{40,})"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
#: The model proxy's per-attempt tokens (app/agent/proxy.py).
PROXY_TOKEN = re.compile(r"\brbp-[A-Za-z0-9_-]{40,}")
#: Installation tokens remembered (each lives an hour; several per run).
SHORT_LIVED_KEPT = 256
#: Installation tokens per pattern: a new token compiles one pattern this small.
SHORT_LIVED_CHUNK = 16
#: Shorter values are not treated as secrets (they would redact ordinary words).
MIN_SECRET_LENGTH = 8
#: The settings' variables whose values are secrets (agent keys come from the policy).
SETTINGS_SECRETS = (
    "DATABASE_URL",
    "REDIS_URL",
    "GITHUB_PRIVATE_KEY",
    "GITHUB_WEBHOOK_SECRET",
    "GITHUB_CLIENT_SECRET",
    "REPAIRBOT_SESSION_SECRET",
)
#: Settings holding a URL: only the password in it is secret.
URL_SETTINGS = frozenset({"DATABASE_URL", "REDIS_URL"})
REDACTED = "[redacted]"


class KnownSecrets:
    """Every secret value this worker holds, so that none leaves in what an
    agent produced: API keys, command agents' environment values, the
    webhook secret, the App's private key (whole and line by line, so a key
    printed in pieces is caught too), installation tokens as they are minted,
    and the model proxy's per-attempt tokens.

    :meth:`redact` is for text that is kept (transcripts, summaries, logs,
    evidence); :meth:`found_in` is for a proposal, which is refused rather
    than altered (a redacted patch would not be the change that was verified).

    Installation tokens (:meth:`add_short_lived`) arrive several per run and
    are matched by small patterns of their own (:data:`SHORT_LIVED_CHUNK`
    tokens each), so a new one compiles one small pattern instead of the
    whole alternation of every value (the private key's lines among them:
    about 12 ms a token, 20 ms once 256 are kept). Text is redacted of the
    long-lived values first, then of the tokens. A token that contains
    another held value or is contained in one (never seen: tokens are random)
    joins the long-lived values instead, so overlapping secrets still go
    whole, longest first.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._held: re.Pattern[str] = PROXY_TOKEN
        #: Installation tokens kept, oldest first.
        self._short_lived: list[str] = []
        #: The tokens of ``_short_lived`` not among ``_values``, in chunks
        #: (oldest first), and one compiled pattern per chunk.
        self._chunks: list[list[str]] = []
        self._chunk_patterns: list[re.Pattern[str]] = []
        #: Tokens among ``_values`` because they overlap another value.
        self._promoted: set[str] = set()
        self.add(*values)

    def __repr__(self) -> str:  # never show the values
        return f"KnownSecrets({len(self)} values)"

    def __len__(self) -> int:
        return len(self._values) + sum(len(chunk) for chunk in self._chunks)

    def values(self) -> list[str]:
        return sorted(self._values.union(*self._chunks))

    def add(self, *values: str) -> None:
        for value in values:
            for part in _parts(value):
                if part not in self._values:
                    self._values.add(part)
                    self._pattern = None
                    for token in [t for chunk in self._chunks for t in chunk]:
                        if token in part or part in token:
                            self._promote(token)

    def add_short_lived(self, value: str) -> None:
        """A token that expires (an installation token lives an hour): only
        the latest :data:`SHORT_LIVED_KEPT` are kept, so a worker running for
        months does not grow its patterns without bound (the ``ghs_`` shape
        still catches older ones)."""
        if value in self._short_lived:
            return
        self._short_lived.append(value)
        if len(value) < MIN_SECRET_LENGTH or value in self._values:
            pass  # not a secret on its own, or already held
        elif self._overlaps(value):
            self._promoted.add(value)
            self.add(value)
        else:
            if not self._chunks or len(self._chunks[-1]) >= SHORT_LIVED_CHUNK:
                self._chunks.append([])
                self._chunk_patterns.append(PROXY_TOKEN)  # replaced just below
            self._chunks[-1].append(value)
            self._chunk_patterns[-1] = _alternation(self._chunks[-1])
        if len(self._short_lived) > SHORT_LIVED_KEPT:
            self._forget(self._short_lived.pop(0))

    def _overlaps(self, token: str) -> bool:
        """Whether ``token`` contains, or is part of, a value already held."""
        held = self._values.union(*self._chunks)
        return any(token in value or value in token for value in held)

    def _promote(self, token: str) -> None:
        """Move ``token`` from its chunk to the long-lived values."""
        self._drop_from_chunks(token)
        self._promoted.add(token)
        self._values.add(token)
        self._pattern = None

    def _forget(self, token: str) -> None:
        if self._drop_from_chunks(token):
            return
        if token in self._promoted:
            self._promoted.discard(token)
            self._values.discard(token)
            self._pattern = None

    def _drop_from_chunks(self, token: str) -> bool:
        for i, chunk in enumerate(self._chunks):
            if token in chunk:
                chunk.remove(token)
                if chunk:
                    self._chunk_patterns[i] = _alternation(chunk)
                else:
                    del self._chunks[i], self._chunk_patterns[i]
                return True
        return False

    @classmethod
    def from_env(cls, env: Mapping[str, str], extra: Iterable[str] = ()) -> KnownSecrets:
        """The settings' secrets (:data:`SETTINGS_SECRETS` in ``env``) plus ``extra``.

        Of a service URL only its password is secret: a repository may well
        contain ``redis://127.0.0.1:6379/0``, and a proposal must not be
        refused for it.
        """
        values = []
        for name in SETTINGS_SECRETS:
            value = env.get(name) or ""
            values += _url_password(value) if name in URL_SETTINGS else [value]
        return cls([*values, *extra])

    def _compiled(self) -> re.Pattern[str]:
        if self._pattern is None:
            self._pattern = _alternation(self._values, [TOKEN_SHAPES.pattern])
            self._held = _alternation(self._values, [PROXY_TOKEN.pattern])
        return self._pattern

    def redact(self, text: str) -> str:
        text = self._compiled().sub(REDACTED, text)
        for pattern in self._chunk_patterns:
            text = pattern.sub(REDACTED, text)
        return text

    def redact_bytes(self, data: bytes) -> bytes:
        # surrogateescape keeps every other byte exactly as it was.
        return self.redact(data.decode(errors="surrogateescape")).encode(errors="surrogateescape")

    def found_in(self, text: str) -> bool:
        """Whether ``text`` holds a value this worker holds (or a proxy token).

        Token *shapes* are not enough here: a proposal may legitimately hold
        ``sk-learn-...`` or a test fixture's PEM header, and it is refused
        outright, not redacted.
        """
        self._compiled()
        if self._held.search(text) is not None:
            return True
        return any(pattern.search(text) is not None for pattern in self._chunk_patterns)


def _alternation(values: Iterable[str], shapes: Iterable[str] = ()) -> re.Pattern[str]:
    """One pattern for ``values`` (longest first: a value that contains
    another goes whole), then ``shapes``."""
    known = sorted(values, key=len, reverse=True)
    alternatives = [re.escape(v) for v in known] + list(shapes)
    return re.compile("|".join(f"(?:{a})" for a in alternatives))


def _parts(value: str) -> list[str]:
    """``value`` and the pieces of it that are secret on their own: the lines
    of a PEM key, the password of a URL."""
    parts = [value] if len(value) >= MIN_SECRET_LENGTH else []
    if "-----BEGIN" in value:
        parts += [
            line.strip()
            for line in value.splitlines()
            if len(line.strip()) >= 16 and not line.startswith("-----")
        ]
    return parts + _url_password(value)


def _url_password(value: str) -> list[str]:
    if "://" not in value or "@" not in value:
        return []
    userinfo = value.split("://", 1)[1].rsplit("@", 1)[0]
    password = userinfo.partition(":")[2]
    return [password] if len(password) >= MIN_SECRET_LENGTH else []


class RedactingFilter(logging.Filter):
    """A logging filter that removes known secrets from every record's message."""

    def __init__(self, secrets: KnownSecrets) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = self.secrets.redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True

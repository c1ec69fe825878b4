"""One typed settings object, built once from the environment and passed down.

Nothing here runs at import time: call :func:`Settings.from_env` at process
start-up (the CLI does) and hand the result to whatever needs it.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.sandbox.egress import DEFAULT_ALLOW, EgressPolicy, parse_destinations
from app.sandbox.policy import Isolation, parse_mode
from app.sandbox.quota import DiskQuota


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable."""


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from exc


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from exc


def _argv(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = env.get(name, "").strip()
    if not raw:
        return ()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} must be a JSON list of arguments: {exc}") from exc
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{name} must be a non-empty JSON list of strings")
    return tuple(value)


#: What ``repairbot register`` writes, in the data directory unless told otherwise.
APP_FILE_NAME = "github-app.json"
#: Registration file keys -> the variables they stand for.
APP_FILE_KEYS = {
    "app_id": "GITHUB_APP_ID",
    "slug": "GITHUB_APP_SLUG",
    "pem": "GITHUB_PRIVATE_KEY",
    "webhook_secret": "GITHUB_WEBHOOK_SECRET",
    "client_id": "GITHUB_CLIENT_ID",
    "client_secret": "GITHUB_CLIENT_SECRET",
    "webhook_proxy_url": "REPAIRBOT_WEBHOOK_PROXY_URL",
}


def read_app_file(path: Path) -> dict[str, str]:
    """The variables a registration file stands for. It holds a private key:
    refuse it when others than its owner may read it (as ssh does)."""
    try:
        mode = path.stat().st_mode
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"REPAIRBOT_APP_FILE {path} cannot be read: {exc}") from exc
    if mode & 0o077:
        raise ConfigError(f"{path} is readable by others (mode {mode & 0o777:o}); chmod 600 it")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} is not a JSON object")
    return {var: str(raw[key]) for key, var in APP_FILE_KEYS.items() if raw.get(key)}


def _egress(env: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """REPAIRBOT_EGRESS_ALLOW (unset: the registries; ``none``: nowhere) and _PRIVATE."""
    raw = env.get("REPAIRBOT_EGRESS_ALLOW", "").strip()
    try:
        if not raw:
            allow: tuple[str, ...] = DEFAULT_ALLOW
        elif raw.lower() == "none":
            allow = ()
        else:
            allow = parse_destinations(raw, setting="REPAIRBOT_EGRESS_ALLOW")
        private = parse_destinations(
            env.get("REPAIRBOT_EGRESS_ALLOW_PRIVATE", ""),
            setting="REPAIRBOT_EGRESS_ALLOW_PRIVATE",
            need_port=True,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return {"egress_allow": allow, "egress_allow_private": private}


#: A GitHub user or organization name.
_ACCOUNT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}")


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}")


def _agent_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The agent policy's variables and the API keys they name."""
    names = ["REPAIRBOT_AGENT_API_KEYS", "REPAIRBOT_AGENT_BASE_URLS"]
    # The built-in agent's settings (app/agent/factory.py, docs/agents.md).
    names += [
        "REPAIRBOT_AGENT_DEFAULT",
        "REPAIRBOT_AGENT_BUDGET",
        "REPAIRBOT_AGENT_PRICES",
        "REPAIRBOT_AGENT_COMMAND_ENV",
        "REPAIRBOT_AGENT_REPOSITORY_COMMANDS",
        "REPAIRBOT_AGENT_COMMAND_MODEL_KEY",
        "REPAIRBOT_AGENT_PROXY_ADDRESS",
    ]
    # Entries are NAME or NAME=URL (the base URL the key is bound to).
    names += [
        n.partition("=")[0].strip() for n in env.get("REPAIRBOT_AGENT_API_KEYS", "").split(",")
    ]
    names += [n.strip() for n in env.get("REPAIRBOT_AGENT_COMMAND_ENV", "").split(",")]
    return tuple((n, env[n]) for n in dict.fromkeys(names) if n and env.get(n))


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Every knob repairbot has. Field docs name the environment variable."""

    #: REPAIRBOT_DATA_DIR: local state (SQLite file, evidence, workspaces).
    data_dir: Path = Path(".data")
    #: DATABASE_URL: SQLAlchemy URL; defaults to a SQLite file in ``data_dir``.
    database_url: str = ""
    #: REDIS_URL: arq over Redis for dispatch; empty means the in-process dispatcher.
    redis_url: str = ""
    #: REPAIRBOT_WORKER_ID: names this worker in attempt records.
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    #: REPAIRBOT_CODE_VERSION: recorded with every attempt so results can be traced.
    code_version: str = "dev"
    #: REPAIRBOT_MAX_HISTORY_EVENTS: above this a run is asked to continue-as-new.
    max_history_events: int = 2000
    #: REPAIRBOT_RECONCILE_INTERVAL: seconds between reconciler passes.
    reconcile_interval: float = 1.0
    #: REPAIRBOT_RELAY_GRACE: seconds before an unconsumed outbox job is relayed again.
    relay_grace: float = 2.0
    #: REPAIRBOT_WORKER_SILENCE: seconds without a liveness beat after which a
    #: worker counts as dead and its attempts are released for retry.
    worker_silence: float = 15.0
    #: REPAIRBOT_CONCURRENCY: jobs one worker runs at once.
    concurrency: int = 8
    #: REPAIRBOT_DRAIN_GRACE: seconds a worker told to stop (SIGTERM) lets its
    #: running jobs finish before handing the rest back.
    drain_grace: float = 30.0
    #: REPAIRBOT_DB_PATIENCE: seconds a worker retries a database write through
    #: an outage before giving it up (an attempt it cannot record is released).
    db_patience: float = 15.0
    #: REPAIRBOT_ARQ_POLL_DELAY: seconds between a worker's polls of an arq
    #: queue when no doorbell rings: the most a job whose ring was lost, or a
    #: timer, waits past its due time.
    #: (The same default as app.engine._arq_dispatch.POLL_DELAY, kept apart so
    #: that reading settings does not import the engine.)
    arq_poll_delay: float = 0.5

    #: GITHUB_API_URL: REST base URL (the emulator's in tests and the demo).
    github_api_url: str = "https://api.github.com"
    #: GITHUB_GIT_URL: where repositories are cloned from and pushed to
    #: (``<url>/<owner>/<repo>.git``).
    github_git_url: str = "https://github.com"
    #: GITHUB_APP_ID
    github_app_id: str = ""
    #: GITHUB_PRIVATE_KEY (PEM text) or GITHUB_PRIVATE_KEY_FILE (path).
    github_private_key: str = field(default="", repr=False)
    #: GITHUB_WEBHOOK_SECRET
    github_webhook_secret: str = field(default="", repr=False)
    #: GITHUB_APP_SLUG: the App's slug; its bot user is ``<slug>[bot]``.
    github_app_slug: str = "repairbot"
    #: REPAIRBOT_TRIGGER_LABEL
    trigger_label: str = "repairbot"
    #: REPAIRBOT_CANCEL_ON_CLOSE: closing the issue cancels its run.
    cancel_on_close: bool = True
    #: REPAIRBOT_CANCEL_ON_UNLABEL: removing the trigger label cancels its run.
    cancel_on_unlabel: bool = True
    #: REPAIRBOT_ONBOARDING: on installation, propose ``.github/repairbot.yml``
    #: in a pull request to each repository that has none.
    onboarding: bool = True
    #: REPAIRBOT_REQUIRE_CONFIG: a repository without ``.github/repairbot.yml``
    #: gets no run (the issue is told how to add one); ``false`` runs with defaults.
    require_config: bool = True

    #: REPAIRBOT_EVIDENCE_STORE: ``database`` (default: every machine reads it) or
    #: ``folder`` (``<data_dir>/evidence``; one machine only).
    evidence_store: str = "database"
    #: REPAIRBOT_EVIDENCE_MAX_BYTES: an artifact above this is stored cut to its
    #: head and tail around a marker saying so.
    evidence_max_bytes: int = 8 * 1024 * 1024
    #: REPAIRBOT_EVIDENCE_RETENTION_DAYS: unreferenced artifacts older than this
    #: are collected (given here in seconds).
    evidence_retention: float = 7 * 24 * 3600.0

    #: REPAIRBOT_AGENT_COMMAND: the operator's default command agent, a JSON list
    #: of arguments (used when a repository's config names no agent).
    agent_command: tuple[str, ...] = ()
    #: REPAIRBOT_AGENT_NETWORK: command agents may reach the network (a CLI agent
    #: calling its model API needs it); repository commands never get it from this.
    agent_network: bool = False
    #: REPAIRBOT_AGENT_API_KEYS (names), REPAIRBOT_AGENT_BASE_URLS and the named
    #: keys' values: what ``AgentPolicy.from_env`` reads, kept here because the
    #: process environment is scrubbed after start-up.
    agent_env: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    #: REPAIRBOT_SANDBOX: auto | bwrap | none (see app/sandbox/policy.py). ``none``
    #: runs repository code unisolated: only for a trusted single-user setup.
    sandbox: str = "auto"
    #: REPAIRBOT_SANDBOX_READ_ONLY: extra paths (os.pathsep-separated) commands
    #: may read, e.g. a toolchain outside /usr.
    sandbox_read_only: tuple[Path, ...] = ()
    #: REPAIRBOT_WORKSPACE_QUOTA_MIB: what a command's writable paths (the
    #: checkout, $HOME, $TMPDIR) may hold; enforced while it runs
    #: (app/sandbox/quota.py) and before a proposal is taken.
    workspace_quota_mib: int = 4096
    #: GITHUB_PRIVATE_KEY_FILE: where the key was read from (hidden from commands).
    github_private_key_file: Path | None = None
    #: REPAIRBOT_EGRESS_ALLOW: where a networked sandbox step (the base's setup
    #: with ``network: setup``) may connect through the egress proxy: ``host``
    #: (ports 443 and 80) or ``host:port``, comma-separated; default: the
    #: common package registries (app/sandbox/egress.py DEFAULT_ALLOW);
    #: ``none``: networked steps reach nothing.
    egress_allow: tuple[str, ...] = DEFAULT_ALLOW
    #: REPAIRBOT_EGRESS_ALLOW_PRIVATE: exact ``host:port`` entries allowed to
    #: resolve to loopback/private/link-local addresses (a mirror on your own
    #: network). Empty by default.
    egress_allow_private: tuple[str, ...] = ()

    #: REPAIRBOT_PUBLIC_URL: where people reach this service (the sign-in
    #: callback and links are built from it), e.g. ``https://repairbot.example.com``.
    public_url: str = ""
    #: GITHUB_WEB_URL: GitHub's web origin (sign-in and App settings pages).
    github_web_url: str = "https://github.com"
    #: GITHUB_CLIENT_ID / GITHUB_CLIENT_SECRET: the App's own user authorization
    #: (sign-in with GitHub).
    github_client_id: str = ""
    github_client_secret: str = field(default="", repr=False)
    #: REPAIRBOT_SESSION_SECRET: signs and encrypts session cookies (32+ characters).
    session_secret: str = field(default="", repr=False)
    #: REPAIRBOT_SESSION_HOURS: a sign-in lasts this long.
    session_hours: float = 8.0
    #: REPAIRBOT_PERMISSION_CACHE_SECONDS: how long what GitHub said about a
    #: user's repository access is trusted before asking again.
    permission_cache_seconds: float = 60.0
    #: REPAIRBOT_WORKFLOWS_PERMISSION: ask for the Workflows permission at
    #: registration (needed only to push fixes under ``.github/workflows/``).
    workflows_permission: bool = False
    #: REPAIRBOT_APP_FILE: the App credentials ``repairbot register`` wrote
    #: (default ``<data_dir>/github-app.json`` when present); variables win.
    app_file: Path | None = None

    #: REPAIRBOT_WEBHOOK_PROXY_URL: a smee-compatible channel ``repairbot dev``
    #: receives webhooks from (development on a machine GitHub cannot reach).
    webhook_proxy_url: str = ""
    #: REPAIRBOT_WEBHOOK_PROXY_SERVICE: where ``repairbot register --webhook-proxy
    #: new`` creates a channel (``POST <service>/new``).
    webhook_proxy_service: str = "https://smee.io"
    #: REPAIRBOT_PROPOSAL_OWNER: the organization (where the App is installed
    #: on all repositories) whose forks hold repairbot's proposals. Pull requests
    #: come from those forks, so GitHub runs the base repository's workflows for
    #: them without its secrets (docs/security.md, "Proposals live in a fork").
    proposal_owner: str = ""
    #: REPAIRBOT_PROPOSALS_IN_BASE_REPOSITORY: with no proposal owner, push
    #: proposals to branches of the base repository anyway. Agent code will run
    #: in your CI with your secrets before review.
    proposals_in_base_repository: bool = False

    #: REPAIRBOT_FAULT_POINT: a named fault point where the process kills itself
    #: (crash tests only; see app/engine/_faults.py).
    fault_point: str = ""

    #: REPAIRBOT_WEBHOOK_MAX_BYTES: largest webhook body accepted (413 above);
    #: GitHub caps payloads at 25 MB.
    webhook_max_bytes: int = 25 * 1024 * 1024
    #: REPAIRBOT_WEBHOOK_READ_TIMEOUT: seconds a webhook body may take to arrive
    #: in full (408 after). GitHub itself gives up on a delivery after 10 s.
    webhook_read_timeout: float = 10.0
    #: REPAIRBOT_WEBHOOK_BYTES_IN_FLIGHT: webhook body bytes the web process
    #: holds at once across all connections; beyond it new deliveries get 503
    #: with Retry-After (the delivery reconciler has GitHub redeliver them).
    webhook_bytes_in_flight: int = 64 * 1024 * 1024
    #: REPAIRBOT_WEBHOOK_BYTES_PER_CLIENT: of those, what one client address may
    #: hold (0: no cap); a little over one full-size body by default.
    webhook_bytes_per_client: int = 26 * 1024 * 1024
    #: REPAIRBOT_WEBHOOK_BODY_START_TIMEOUT: seconds from a request's head to the
    #: first byte of its body (408 after).
    webhook_body_start_timeout: float = 2.0
    #: REPAIRBOT_WEB_HEADER_TIMEOUT: seconds a request head may take to arrive
    #: (the connection is closed after).
    web_header_timeout: float = 5.0
    #: REPAIRBOT_WEB_CONNECTIONS_PER_CLIENT: connections one client address may
    #: hold at once (0: no cap; behind a reverse proxy every client is the proxy).
    web_connections_per_client: int = 64
    #: REPAIRBOT_MAX_ACTIVE_RUNS_PER_INSTALLATION: repair runs of one GitHub App
    #: installation doing costly work at once; more wait for a slot (0: no cap).
    max_active_runs_per_installation: int = 10
    #: REPAIRBOT_MAX_SPEND_USD_PER_DAY_PER_INSTALLATION: model spend one
    #: installation's runs may record per UTC day; a run that would start past
    #: it stops and says so (0: no cap).
    max_spend_usd_per_day_per_installation: float = 0.0
    #: REPAIRBOT_WEB_SHUTDOWN_GRACE: seconds the web process waits on SIGTERM for
    #: in-flight requests to finish before closing them.
    web_shutdown_grace: float = 30.0
    #: REPAIRBOT_DELIVERY_RECONCILE_INTERVAL: seconds between passes of the delivery
    #: reconciler (asks GitHub to redeliver webhooks the intake never recorded),
    #: also the least time between two redelivery requests for one delivery; 0 = off.
    delivery_reconcile_interval: float = 60.0

    def __post_init__(self) -> None:
        if self.evidence_store not in ("database", "folder"):
            raise ConfigError(
                f"REPAIRBOT_EVIDENCE_STORE must be database or folder, got {self.evidence_store!r}"
            )
        if self.proposal_owner and not _ACCOUNT.fullmatch(self.proposal_owner):
            raise ConfigError(
                f"REPAIRBOT_PROPOSAL_OWNER must be a GitHub account name, "
                f"got {self.proposal_owner!r}"
            )
        if self.evidence_max_bytes < 1024:
            raise ConfigError("REPAIRBOT_EVIDENCE_MAX_BYTES must be at least 1024")
        if not self.database_url:
            object.__setattr__(
                self, "database_url", f"sqlite:///{(self.data_dir / 'repairbot.db').as_posix()}"
            )

    @property
    def sign_in_configured(self) -> bool:
        """Sign-in needs the App's client credentials, a session key and a public URL."""
        return bool(
            self.github_client_id
            and self.github_client_secret
            and len(self.session_secret) >= 32
            and self.public_url
        )

    @property
    def evidence_dir(self) -> Path:
        return self.data_dir / "evidence"

    @property
    def workspaces_dir(self) -> Path:
        return self.data_dir / "workspaces"

    @property
    def git_cache_dir(self) -> Path:
        """Workers' git object caches (app/github/objcache.py): under the data
        directory, which the sandbox never shows."""
        return self.data_dir / "git-cache"

    def isolation(self) -> Isolation:
        """The sandbox repository commands run in on this worker."""
        hidden = [self.data_dir, Path.home()]
        # Every secret file the settings read (grep _FILE): a 0600 file is no
        # protection on the unprivileged path, whose sandbox user is the
        # worker's user outside its user namespace.
        for secret_file in (self.github_private_key_file, self.app_file):
            if secret_file is not None:
                hidden.append(secret_file)
        if self.database_url.startswith("sqlite:///"):
            # The database may live outside the data directory.
            hidden.append(Path(self.database_url.removeprefix("sqlite:///")))
        return Isolation(
            mode=parse_mode(self.sandbox),
            read_only=self.sandbox_read_only,
            hidden=tuple(hidden),
        )

    def disk_quota(self) -> DiskQuota:
        """The workspace's disk quota commands run under (app/sandbox/quota.py)."""
        return DiskQuota(bytes=self.workspace_quota_mib * 1024 * 1024)

    def egress_policy(self) -> EgressPolicy:
        """Where networked sandbox steps may connect (the operator's allow-list)."""
        return EgressPolicy(allow=self.egress_allow, allow_private=self.egress_allow_private)

    def secret_env(self) -> dict[str, str]:
        """The secrets, as ``from_env`` reads them: hand them to a worker process
        through :func:`app.secrets.handover`, never in its environment."""
        env = {
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "GITHUB_PRIVATE_KEY": self.github_private_key,
            "GITHUB_WEBHOOK_SECRET": self.github_webhook_secret,
            "GITHUB_CLIENT_SECRET": self.github_client_secret,
            "REPAIRBOT_SESSION_SECRET": self.session_secret,
        }
        env.update(dict(self.agent_env))
        return env

    def secret_names(self) -> list[str]:
        """Environment variables that held secrets (to scrub after start-up)."""
        return [*self.secret_env(), "GITHUB_PRIVATE_KEY_FILE"]

    def to_env(self) -> dict[str, str]:
        """The environment that, with :meth:`secret_env`, makes ``from_env``
        rebuild these settings (for starting worker processes). It holds no
        secret."""
        env = {
            "REPAIRBOT_DATA_DIR": str(self.data_dir),
            "REPAIRBOT_WORKER_ID": self.worker_id,
            "REPAIRBOT_CODE_VERSION": self.code_version,
            "REPAIRBOT_MAX_HISTORY_EVENTS": str(self.max_history_events),
            "REPAIRBOT_RECONCILE_INTERVAL": str(self.reconcile_interval),
            "REPAIRBOT_RELAY_GRACE": str(self.relay_grace),
            "REPAIRBOT_WORKER_SILENCE": str(self.worker_silence),
            "REPAIRBOT_CONCURRENCY": str(self.concurrency),
            "REPAIRBOT_DRAIN_GRACE": str(self.drain_grace),
            "REPAIRBOT_DB_PATIENCE": str(self.db_patience),
            "REPAIRBOT_ARQ_POLL_DELAY": str(self.arq_poll_delay),
            "GITHUB_API_URL": self.github_api_url,
            "GITHUB_GIT_URL": self.github_git_url,
            "GITHUB_APP_ID": self.github_app_id,
            "GITHUB_APP_SLUG": self.github_app_slug,
            "REPAIRBOT_TRIGGER_LABEL": self.trigger_label,
            "REPAIRBOT_CANCEL_ON_CLOSE": str(self.cancel_on_close).lower(),
            "REPAIRBOT_CANCEL_ON_UNLABEL": str(self.cancel_on_unlabel).lower(),
            "REPAIRBOT_ONBOARDING": str(self.onboarding).lower(),
            "REPAIRBOT_REQUIRE_CONFIG": str(self.require_config).lower(),
            "REPAIRBOT_FAULT_POINT": self.fault_point,
            "REPAIRBOT_PROPOSAL_OWNER": self.proposal_owner,
            "REPAIRBOT_PROPOSALS_IN_BASE_REPOSITORY": str(
                self.proposals_in_base_repository
            ).lower(),
            "REPAIRBOT_EVIDENCE_STORE": self.evidence_store,
            "REPAIRBOT_EVIDENCE_MAX_BYTES": str(self.evidence_max_bytes),
            "REPAIRBOT_EVIDENCE_RETENTION_DAYS": repr(self.evidence_retention / 86400),
            "REPAIRBOT_WEBHOOK_MAX_BYTES": str(self.webhook_max_bytes),
            "REPAIRBOT_WEBHOOK_READ_TIMEOUT": str(self.webhook_read_timeout),
            "REPAIRBOT_WEBHOOK_BYTES_IN_FLIGHT": str(self.webhook_bytes_in_flight),
            "REPAIRBOT_WEBHOOK_BYTES_PER_CLIENT": str(self.webhook_bytes_per_client),
            "REPAIRBOT_WEBHOOK_BODY_START_TIMEOUT": str(self.webhook_body_start_timeout),
            "REPAIRBOT_WEB_HEADER_TIMEOUT": str(self.web_header_timeout),
            "REPAIRBOT_WEB_CONNECTIONS_PER_CLIENT": str(self.web_connections_per_client),
            "REPAIRBOT_MAX_ACTIVE_RUNS_PER_INSTALLATION": str(
                self.max_active_runs_per_installation
            ),
            "REPAIRBOT_MAX_SPEND_USD_PER_DAY_PER_INSTALLATION": str(
                self.max_spend_usd_per_day_per_installation
            ),
            "REPAIRBOT_WEB_SHUTDOWN_GRACE": str(self.web_shutdown_grace),
            "REPAIRBOT_DELIVERY_RECONCILE_INTERVAL": str(self.delivery_reconcile_interval),
            "REPAIRBOT_PUBLIC_URL": self.public_url,
            "REPAIRBOT_WEBHOOK_PROXY_URL": self.webhook_proxy_url,
            "REPAIRBOT_WEBHOOK_PROXY_SERVICE": self.webhook_proxy_service,
            "GITHUB_WEB_URL": self.github_web_url,
            "GITHUB_CLIENT_ID": self.github_client_id,
            "REPAIRBOT_SESSION_HOURS": str(self.session_hours),
            "REPAIRBOT_PERMISSION_CACHE_SECONDS": str(self.permission_cache_seconds),
            "REPAIRBOT_WORKFLOWS_PERMISSION": str(self.workflows_permission).lower(),
            "REPAIRBOT_AGENT_NETWORK": str(self.agent_network).lower(),
            "REPAIRBOT_SANDBOX": self.sandbox,
            "REPAIRBOT_SANDBOX_READ_ONLY": os.pathsep.join(map(str, self.sandbox_read_only)),
            "REPAIRBOT_WORKSPACE_QUOTA_MIB": str(self.workspace_quota_mib),
            "REPAIRBOT_EGRESS_ALLOW": ",".join(self.egress_allow) or "none",
            "REPAIRBOT_EGRESS_ALLOW_PRIVATE": ",".join(self.egress_allow_private),
        }
        if self.app_file is not None:
            env["REPAIRBOT_APP_FILE"] = str(self.app_file)
        if self.github_private_key_file is not None:
            env["REPAIRBOT_PRIVATE_KEY_PATH"] = str(self.github_private_key_file)
        if self.agent_command:
            env["REPAIRBOT_AGENT_COMMAND"] = json.dumps(list(self.agent_command))
        return env

    def with_overrides(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        data_dir = Path(env.get("REPAIRBOT_DATA_DIR", ".data"))
        app_file = Path(env["REPAIRBOT_APP_FILE"]) if env.get("REPAIRBOT_APP_FILE") else None
        if app_file is None and (data_dir / APP_FILE_NAME).exists():
            app_file = data_dir / APP_FILE_NAME
        registered = read_app_file(app_file) if app_file is not None else {}
        # The variables win over the registration file, so one setting can be
        # overridden without editing the file.
        env = {**registered, **{k: v for k, v in env.items() if v != ""}}
        key = env.get("GITHUB_PRIVATE_KEY", "")
        key_file = env.get("GITHUB_PRIVATE_KEY_FILE", "")
        if not key and key_file:
            try:
                key = Path(key_file).read_text()
            except OSError as exc:
                raise ConfigError(f"GITHUB_PRIVATE_KEY_FILE cannot be read: {exc}") from exc
        # Where the key came from, so the sandbox can hide it (a worker started
        # by another process gets the key itself and this path).
        key_path = key_file or env.get("REPAIRBOT_PRIVATE_KEY_PATH", "")
        try:
            mode = parse_mode(env.get("REPAIRBOT_SANDBOX", "auto"))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        kwargs: dict[str, Any] = {
            "data_dir": data_dir,
            "database_url": env.get("DATABASE_URL", ""),
            "redis_url": env.get("REDIS_URL", ""),
            "code_version": env.get("REPAIRBOT_CODE_VERSION", "dev"),
            "max_history_events": _int(env, "REPAIRBOT_MAX_HISTORY_EVENTS", 2000),
            "reconcile_interval": _float(env, "REPAIRBOT_RECONCILE_INTERVAL", 1.0),
            "concurrency": _int(env, "REPAIRBOT_CONCURRENCY", 8),
            "relay_grace": _float(env, "REPAIRBOT_RELAY_GRACE", 2.0),
            "worker_silence": _float(env, "REPAIRBOT_WORKER_SILENCE", 15.0),
            "drain_grace": _float(env, "REPAIRBOT_DRAIN_GRACE", 30.0),
            "db_patience": _float(env, "REPAIRBOT_DB_PATIENCE", 15.0),
            "arq_poll_delay": _float(env, "REPAIRBOT_ARQ_POLL_DELAY", 0.5),
            "github_api_url": env.get("GITHUB_API_URL", "https://api.github.com"),
            "github_git_url": env.get("GITHUB_GIT_URL", "https://github.com"),
            "github_app_id": env.get("GITHUB_APP_ID", ""),
            "github_private_key": key,
            "github_webhook_secret": env.get("GITHUB_WEBHOOK_SECRET", ""),
            "github_app_slug": env.get("GITHUB_APP_SLUG", "repairbot"),
            "trigger_label": env.get("REPAIRBOT_TRIGGER_LABEL", "repairbot"),
            "cancel_on_close": _bool(env, "REPAIRBOT_CANCEL_ON_CLOSE", True),
            "cancel_on_unlabel": _bool(env, "REPAIRBOT_CANCEL_ON_UNLABEL", True),
            "onboarding": _bool(env, "REPAIRBOT_ONBOARDING", True),
            "require_config": _bool(env, "REPAIRBOT_REQUIRE_CONFIG", True),
            "fault_point": env.get("REPAIRBOT_FAULT_POINT", ""),
            "proposal_owner": env.get("REPAIRBOT_PROPOSAL_OWNER", "").strip(),
            "proposals_in_base_repository": _bool(
                env, "REPAIRBOT_PROPOSALS_IN_BASE_REPOSITORY", False
            ),
            "agent_command": _argv(env, "REPAIRBOT_AGENT_COMMAND"),
            "evidence_store": env.get("REPAIRBOT_EVIDENCE_STORE", "database") or "database",
            "evidence_max_bytes": _int(env, "REPAIRBOT_EVIDENCE_MAX_BYTES", 8 * 1024 * 1024),
            "evidence_retention": _float(env, "REPAIRBOT_EVIDENCE_RETENTION_DAYS", 7.0) * 86400,
            "webhook_max_bytes": _int(env, "REPAIRBOT_WEBHOOK_MAX_BYTES", 25 * 1024 * 1024),
            "webhook_read_timeout": _float(env, "REPAIRBOT_WEBHOOK_READ_TIMEOUT", 10.0),
            "webhook_bytes_in_flight": _int(
                env, "REPAIRBOT_WEBHOOK_BYTES_IN_FLIGHT", 64 * 1024 * 1024
            ),
            "webhook_bytes_per_client": _int(
                env, "REPAIRBOT_WEBHOOK_BYTES_PER_CLIENT", 26 * 1024 * 1024
            ),
            "webhook_body_start_timeout": _float(env, "REPAIRBOT_WEBHOOK_BODY_START_TIMEOUT", 2.0),
            "web_header_timeout": _float(env, "REPAIRBOT_WEB_HEADER_TIMEOUT", 5.0),
            "web_connections_per_client": _int(env, "REPAIRBOT_WEB_CONNECTIONS_PER_CLIENT", 64),
            "max_active_runs_per_installation": _int(
                env, "REPAIRBOT_MAX_ACTIVE_RUNS_PER_INSTALLATION", 10
            ),
            "max_spend_usd_per_day_per_installation": _float(
                env, "REPAIRBOT_MAX_SPEND_USD_PER_DAY_PER_INSTALLATION", 0.0
            ),
            "web_shutdown_grace": _float(env, "REPAIRBOT_WEB_SHUTDOWN_GRACE", 30.0),
            "delivery_reconcile_interval": _float(
                env, "REPAIRBOT_DELIVERY_RECONCILE_INTERVAL", 60.0
            ),
            "public_url": env.get("REPAIRBOT_PUBLIC_URL", "").rstrip("/"),
            "webhook_proxy_url": env.get("REPAIRBOT_WEBHOOK_PROXY_URL", ""),
            "webhook_proxy_service": env.get(
                "REPAIRBOT_WEBHOOK_PROXY_SERVICE", "https://smee.io"
            ).rstrip("/"),
            "github_web_url": env.get("GITHUB_WEB_URL", "https://github.com").rstrip("/"),
            "github_client_id": env.get("GITHUB_CLIENT_ID", ""),
            "github_client_secret": env.get("GITHUB_CLIENT_SECRET", ""),
            "session_secret": env.get("REPAIRBOT_SESSION_SECRET", ""),
            "session_hours": _float(env, "REPAIRBOT_SESSION_HOURS", 8.0),
            "permission_cache_seconds": _float(env, "REPAIRBOT_PERMISSION_CACHE_SECONDS", 60.0),
            "workflows_permission": _bool(env, "REPAIRBOT_WORKFLOWS_PERMISSION", False),
            "app_file": app_file,
            "agent_network": _bool(env, "REPAIRBOT_AGENT_NETWORK", False),
            "agent_env": _agent_env(env),
            "sandbox": mode,
            "sandbox_read_only": tuple(
                Path(p) for p in env.get("REPAIRBOT_SANDBOX_READ_ONLY", "").split(os.pathsep) if p
            ),
            "github_private_key_file": Path(key_path) if key_path else None,
            "workspace_quota_mib": _int(env, "REPAIRBOT_WORKSPACE_QUOTA_MIB", 4096),
            **_egress(env),
        }
        if kwargs["workspace_quota_mib"] <= 0:
            raise ConfigError("REPAIRBOT_WORKSPACE_QUOTA_MIB must be a positive number of MiB")
        if kwargs["arq_poll_delay"] <= 0:
            raise ConfigError("REPAIRBOT_ARQ_POLL_DELAY must be a positive number of seconds")
        secret = kwargs["session_secret"]
        if secret and len(secret) < 32:
            raise ConfigError("REPAIRBOT_SESSION_SECRET must be at least 32 characters")
        if env.get("REPAIRBOT_WORKER_ID"):
            kwargs["worker_id"] = env["REPAIRBOT_WORKER_ID"]
        return cls(**kwargs)

"""Build the agent a repository asked for, within what the operator allows.

The repository's config chooses the back end and model, but it is written by
people who are not the operator. So:

- API keys are never read from the environment by a name the repository
  chose: the operator offers keys by name (``AgentPolicy.api_keys``), each
  bound to the one base URL it may be sent to (``NAME=URL``, or a name
  containing ``OPENAI``/``ANTHROPIC`` for that provider's public API);
  anything else is refused with a message for the maintainer.
- The operator's command agent (``REPAIRBOT_AGENT_COMMAND``) is the only
  command that gets the operator's agent environment
  (``REPAIRBOT_AGENT_COMMAND_ENV``) and the model proxy. A repository may
  name a command of its own only when the operator allows it
  (``REPAIRBOT_AGENT_REPOSITORY_COMMANDS=true``), and that command gets
  neither: it is repository code like any other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
from pydantic import TypeAdapter, ValidationError

from app.agent.base import Agent
from app.agent.budget import LoopBudget, Price, Usage, price_of
from app.agent.builtin import BuiltinAgent
from app.agent.chat import ChatModel
from app.agent.command import CommandAgent, ModelAccess
from app.agent.context import ContextBudget
from app.agent.http import DEFAULT_BASE_URLS
from app.agent.journal import LoopHost
from app.agent.proxy import DEFAULT_PROXY_ADDRESS, ModelProxy, Upstream
from app.config import ConfigError
from app.engine import PermanentError
from app.repo_config import AgentConfig
from app.sandbox.runner import Heartbeat, Sandbox

_PRICES = TypeAdapter(dict[str, Price])


@dataclass(frozen=True, kw_only=True)
class AgentPolicy:
    """The operator's side of agent configuration, built once per worker."""

    #: Agent used when a repository configures none.
    default: AgentConfig | None = None
    #: API keys repositories may name in ``api_key_env``, by that name.
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Base URLs an API key may be sent to (exact match, no trailing slash).
    allowed_base_urls: frozenset[str] = frozenset(DEFAULT_BASE_URLS.values())
    #: Extra environment for command agents (a CLI agent's own API key).
    command_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Caps of the built-in agent loop, per repair attempt and per run.
    budget: LoopBudget = field(default_factory=LoopBudget)
    #: US dollars per million tokens, by model name (or name prefix).
    prices: Mapping[str, Price] = field(default_factory=dict)
    #: The one base URL each offered key may be sent to, by key name; a key
    #: missing here is bound by its name (see :func:`key_binding`).
    key_urls: Mapping[str, str] = field(default_factory=dict)
    #: Whether a repository's config may name an agent command of its own
    #: (``REPAIRBOT_AGENT_REPOSITORY_COMMANDS``); it never gets ``command_env``.
    repository_commands: bool = False
    #: The offered key the operator's command agent uses through the model
    #: proxy (``REPAIRBOT_AGENT_COMMAND_MODEL_KEY``); the agent gets a
    #: per-attempt token, never the key.
    command_model_key: str | None = None
    #: The proxy's address inside the sandbox (``REPAIRBOT_AGENT_PROXY_ADDRESS``).
    proxy_address: str = DEFAULT_PROXY_ADDRESS

    @property
    def secrets(self) -> list[str]:
        """Values that must never appear in a transcript."""
        return [*self.api_keys.values(), *self.command_env.values()]

    def command_upstream(self) -> Upstream | None:
        """Where the operator's command agent's model calls go, with which key."""
        name = self.command_model_key
        if not name:
            return None
        key, url = self.api_keys.get(name), self.key_url(name)
        if not key or not url:
            raise PermanentError(
                f"REPAIRBOT_AGENT_COMMAND_MODEL_KEY {name} is not an offered, bound API key"
            )
        if "anthropic" in (name + url).lower():
            return Upstream(provider="anthropic", base_url=url, api_key=key)
        return Upstream(provider="openai", base_url=url, api_key=key)

    def model_access(self, proxy: ModelProxy | None) -> ModelAccess | None:
        """The operator's command agent's way to its model, when one is configured."""
        upstream = self.command_upstream()
        if upstream is None:
            return None
        if proxy is None:
            raise PermanentError("this worker runs no model proxy for the command agent")
        return ModelAccess(proxy=proxy, upstream=upstream, address=self.proxy_address)

    def key_url(self, name: str) -> str | None:
        """The base URL the key ``name`` is bound to, or ``None`` when unbound."""
        return self.key_urls.get(name) or key_binding(name)

    #: Command agents may reach the network (``REPAIRBOT_AGENT_NETWORK``): a CLI
    #: agent calling its model needs it. Off by default: the sandbox has none.
    command_network: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, default: AgentConfig | None = None) -> AgentPolicy:
        """Read ``REPAIRBOT_AGENT_API_KEYS`` (comma-separated variable names
        whose values are offered), ``REPAIRBOT_AGENT_BASE_URLS`` (extra
        allowed base URLs, comma-separated), ``REPAIRBOT_AGENT_COMMAND_ENV``
        (comma-separated variable names passed on to command agents, e.g. a
        CLI agent's own API key), ``REPAIRBOT_AGENT_DEFAULT`` (the
        default agent as JSON, used when ``default`` is not given),
        ``REPAIRBOT_AGENT_BUDGET`` (JSON ``{"attempt": {...}, "run": {...}}``
        with ``turns``, ``tool_calls``, ``tokens``, ``cost_usd``) and
        ``REPAIRBOT_AGENT_PRICES`` (JSON ``{"<model>": {"input_per_mtok": ..,
        "output_per_mtok": ..}}``). The built-in agent's commands never reach
        the network: they are code the model chose."""
        entries = [n.strip() for n in env.get("REPAIRBOT_AGENT_API_KEYS", "").split(",")]
        names = [entry.partition("=")[0].strip() for entry in entries]
        key_urls = {
            name.strip(): url.strip().rstrip("/")
            for name, _, url in (entry.partition("=") for entry in entries)
            if name.strip() and url.strip()
        }
        unbound = [n for n in names if n and env.get(n) and not (key_urls.get(n) or key_binding(n))]
        if unbound:
            raise ConfigError(
                f"REPAIRBOT_AGENT_API_KEYS: bind {', '.join(unbound)} to the base URL it is for "
                "(NAME=https://...): a key is only ever sent to its own provider"
            )
        urls = [u.strip().rstrip("/") for u in env.get("REPAIRBOT_AGENT_BASE_URLS", "").split(",")]
        passed = [n.strip() for n in env.get("REPAIRBOT_AGENT_COMMAND_ENV", "").split(",")]
        try:
            if default is None and env.get("REPAIRBOT_AGENT_DEFAULT"):
                default = AgentConfig.model_validate_json(env["REPAIRBOT_AGENT_DEFAULT"])
            budget = (
                LoopBudget.model_validate_json(env["REPAIRBOT_AGENT_BUDGET"])
                if env.get("REPAIRBOT_AGENT_BUDGET")
                else LoopBudget()
            )
            prices = _PRICES.validate_python(json.loads(env.get("REPAIRBOT_AGENT_PRICES") or "{}"))
        except (ValidationError, ValueError) as exc:
            raise ConfigError(f"agent settings (REPAIRBOT_AGENT_*) are malformed: {exc}") from exc
        return cls(
            default=default,
            api_keys={n: env[n] for n in names if n and env.get(n)},
            key_urls=key_urls,
            allowed_base_urls=(
                frozenset(DEFAULT_BASE_URLS.values())
                | {u for u in urls if u}
                | set(key_urls.values())
            ),
            repository_commands=env.get("REPAIRBOT_AGENT_REPOSITORY_COMMANDS", "").lower()
            in ("1", "true"),
            command_model_key=env.get("REPAIRBOT_AGENT_COMMAND_MODEL_KEY") or None,
            proxy_address=env.get("REPAIRBOT_AGENT_PROXY_ADDRESS") or DEFAULT_PROXY_ADDRESS,
            command_env={n: env[n] for n in passed if n and env.get(n)},
            budget=budget,
            prices=prices,
        )


def key_binding(name: str) -> str | None:
    """The public API a key is for by its name (``OPENAI_API_KEY``,
    ``TEAM_ANTHROPIC_KEY``); ``None`` when the name says neither or both."""
    upper = name.upper()
    found = [url for provider, url in DEFAULT_BASE_URLS.items() if provider.upper() in upper]
    return found[0] if len(found) == 1 else None


def build_agent(
    config: AgentConfig | None,
    *,
    policy: AgentPolicy,
    http_client: httpx.AsyncClient | None,
    time_limit: float,
    sandbox: Sandbox | None = None,
    heartbeat: Heartbeat | None = None,
    host: LoopHost | None = None,
    earlier_usage: Usage | None = None,
    model_access: ModelAccess | None = None,
) -> Agent:
    """The agent for ``config`` (or the operator's default). Raises
    :class:`PermanentError` when it cannot be built as configured."""
    operators = config is None
    config = config or policy.default
    if config is None:
        raise PermanentError(
            "no coding agent is configured: add an `agent` section to .github/repairbot.yml"
        )
    if config.backend == "command":
        assert config.command is not None
        if operators:
            return CommandAgent(
                config.command,
                time_limit=time_limit,
                sandbox=sandbox,
                extra_env=policy.command_env,
                heartbeat=heartbeat,
                network=policy.command_network,
                model_access=model_access,
            )
        if not policy.repository_commands:
            raise PermanentError(
                "agent.command: this installation runs only its own agent command; remove "
                "`agent` from .github/repairbot.yml (or ask the operator to allow "
                "repository-chosen agents)"
            )
        # The repository's own command is repository code: no operator
        # environment, no model access, no network.
        return CommandAgent(
            config.command, time_limit=time_limit, sandbox=sandbox, heartbeat=heartbeat
        )
    assert config.provider is not None and config.model is not None
    base_url = (config.base_url or DEFAULT_BASE_URLS[config.provider]).rstrip("/")
    if base_url not in policy.allowed_base_urls:
        raise PermanentError(
            f"agent.base_url {base_url} is not one this installation sends API keys to"
        )
    key_name = config.api_key_env or f"{config.provider.upper()}_API_KEY"
    api_key = policy.api_keys.get(key_name)
    if not api_key:
        raise PermanentError(
            f"agent.api_key_env {key_name} is not an API key this installation offers"
        )
    if policy.key_url(key_name) != base_url:
        raise PermanentError(
            f"agent.api_key_env {key_name} is only sent to {policy.key_url(key_name) or 'no URL'}, "
            f"not to {base_url}"
        )
    if http_client is None:
        raise PermanentError("this worker has no HTTP client for agents")
    if host is None:
        raise PermanentError("the built-in agent needs an activity to record its steps")
    return BuiltinAgent(
        model=ChatModel(
            provider=config.provider,
            model=config.model,
            api_key=api_key,
            base_url=base_url,
            client=http_client,
        ),
        host=host,
        time_limit=time_limit,
        budget=policy.budget,
        price=price_of(policy.prices, config.model),
        earlier_usage=earlier_usage,
        sandbox=sandbox,
        context=ContextBudget(max_files=config.max_files),
        # Model-chosen commands: never any network (docs/security.md, "Egress").
        network=False,
    )

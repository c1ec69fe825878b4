"""Build the agent a repository asked for, within what the operator allows.

The repository's config chooses the back end and model, but it is written by
people who are not the operator. So API keys are never read from the
environment by a name the repository chose: the operator offers keys by name
(``AgentPolicy.api_keys``) and the base URLs they may be sent to; anything
else is refused with a message for the maintainer.
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
from app.agent.command import CommandAgent
from app.agent.context import ContextBudget
from app.agent.http import DEFAULT_BASE_URLS
from app.agent.journal import LoopHost
from app.config import ConfigError
from app.engine.errors import PermanentError
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
    #: Whether the built-in agent's commands may reach the network.
    tool_network: bool = False

    @property
    def secrets(self) -> list[str]:
        """Values that must never appear in a transcript."""
        return [*self.api_keys.values(), *self.command_env.values()]

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
        "output_per_mtok": ..}}``) and ``REPAIRBOT_AGENT_TOOL_NETWORK``
        (``true`` lets the built-in agent's commands reach the network)."""
        names = [n.strip() for n in env.get("REPAIRBOT_AGENT_API_KEYS", "").split(",")]
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
            allowed_base_urls=frozenset(DEFAULT_BASE_URLS.values()) | {u for u in urls if u},
            command_env={n: env[n] for n in passed if n and env.get(n)},
            tool_network=env.get("REPAIRBOT_AGENT_TOOL_NETWORK", "").lower() in ("1", "true"),
            budget=budget,
            prices=prices,
        )


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
) -> Agent:
    """The agent for ``config`` (or the operator's default). Raises
    :class:`PermanentError` when it cannot be built as configured."""
    config = config or policy.default
    if config is None:
        raise PermanentError(
            "no coding agent is configured: add an `agent` section to .github/repairbot.yml"
        )
    if config.backend == "command":
        assert config.command is not None
        return CommandAgent(
            config.command,
            time_limit=time_limit,
            sandbox=sandbox,
            extra_env=policy.command_env,
            heartbeat=heartbeat,
            network=policy.command_network,
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
        network=policy.tool_network,
    )

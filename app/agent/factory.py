"""Build the agent a repository asked for, within what the operator allows.

The repository's config chooses the back end and model, but it is written by
people who are not the operator. So API keys are never read from the
environment by a name the repository chose: the operator offers keys by name
(``AgentPolicy.api_keys``) and the base URLs they may be sent to; anything
else is refused with a message for the maintainer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from app.agent.base import Agent
from app.agent.command import CommandAgent
from app.agent.context import ContextBudget
from app.agent.http import DEFAULT_BASE_URLS, HttpAgent
from app.commands import Heartbeat, Sandbox
from app.engine.errors import PermanentError
from app.repo_config import AgentConfig


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
    #: Command agents may reach the network (``REPAIRBOT_AGENT_NETWORK``): a CLI
    #: agent calling its model needs it. Off by default: the sandbox has none.
    command_network: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, default: AgentConfig | None = None) -> AgentPolicy:
        """Read ``REPAIRBOT_AGENT_API_KEYS`` (comma-separated variable names
        whose values are offered) and ``REPAIRBOT_AGENT_BASE_URLS`` (extra
        allowed base URLs, comma-separated)."""
        names = [n.strip() for n in env.get("REPAIRBOT_AGENT_API_KEYS", "").split(",")]
        urls = [u.strip().rstrip("/") for u in env.get("REPAIRBOT_AGENT_BASE_URLS", "").split(",")]
        return cls(
            default=default,
            api_keys={n: env[n] for n in names if n and env.get(n)},
            allowed_base_urls=frozenset(DEFAULT_BASE_URLS.values()) | {u for u in urls if u},
        )


def build_agent(
    config: AgentConfig | None,
    *,
    policy: AgentPolicy,
    http_client: httpx.AsyncClient | None,
    time_limit: float,
    sandbox: Sandbox | None = None,
    heartbeat: Heartbeat | None = None,
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
    return HttpAgent(
        provider=config.provider,
        model=config.model,
        api_key=api_key,
        base_url=base_url,
        client=http_client,
        budget=ContextBudget(max_files=config.max_files),
    )

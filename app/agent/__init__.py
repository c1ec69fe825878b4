"""The coding agent: one interface (:class:`Agent`), two real back ends.

- :class:`CommandAgent` runs any CLI agent in the workspace.
- :class:`HttpAgent` asks an OpenAI-compatible or Anthropic chat API.

Either way the proposal is the diff left in the workspace.
"""

from app.agent.base import Agent, AgentFailed, AgentProposal, AgentRequest, Feedback
from app.agent.command import CommandAgent
from app.agent.factory import AgentPolicy, build_agent
from app.agent.http import AgentHttp, HttpAgent

__all__ = [
    "Agent",
    "AgentFailed",
    "AgentHttp",
    "AgentPolicy",
    "AgentProposal",
    "AgentRequest",
    "CommandAgent",
    "Feedback",
    "HttpAgent",
    "build_agent",
]

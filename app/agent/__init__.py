"""The coding agent: one interface (:class:`Agent`), two real back ends.

- :class:`CommandAgent` runs any CLI agent in the workspace.
- :class:`BuiltinAgent` runs a durable tool-use loop over an
  OpenAI-compatible or Anthropic chat API.

Either way the proposal is the diff left in the workspace.
"""

from app.agent.base import Agent, AgentFailed, AgentProposal, AgentRequest, Feedback
from app.agent.builtin import BudgetExhausted, BuiltinAgent, LoopStopped
from app.agent.command import CommandAgent
from app.agent.factory import AgentPolicy, build_agent
from app.agent.http import AgentHttp
from app.agent.journal import LoopHost

__all__ = [
    "Agent",
    "AgentFailed",
    "AgentHttp",
    "AgentPolicy",
    "AgentProposal",
    "AgentRequest",
    "BudgetExhausted",
    "BuiltinAgent",
    "CommandAgent",
    "Feedback",
    "LoopHost",
    "LoopStopped",
    "build_agent",
]

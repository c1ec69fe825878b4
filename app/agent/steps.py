"""The built-in agent's recorded steps: what the conversation is made of.

A conversation is a list of steps in a neutral shape (not OpenAI's, not
Anthropic's): the opening prompt, each model turn (its text, its tool calls
and its token counts), each tool result, each corrective note we sent, and
each trim of old tool output. The wire format of either API is derived from
this list (:mod:`app.agent.wire`), so a run recorded with one provider reads
the same in the transcript, and a resumed attempt rebuilds exactly the
messages the crashed one would have sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from app.secrets import KnownSecrets

#: What a tool result becomes once trimmed to fit the context window.
TRIMMED = "[output removed to fit the context window; run the tool again if you need it]"


class _Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Step):
    id: str
    name: str
    #: The arguments as the model wrote them (JSON text; possibly malformed).
    arguments: str

    def parsed(self) -> dict[str, Any] | None:
        """The arguments as an object, or ``None`` when they are not one."""
        try:
            value = json.loads(self.arguments or "{}")
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


class ModelTurn(_Step):
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    #: The model declined to answer (OpenAI ``message.refusal``, Anthropic
    #: ``stop_reason: refusal``).
    refusal: str | None = None
    stop_reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0


class PromptStep(_Step):
    type: Literal["prompt"] = "prompt"
    system: str
    user: str


class ModelStep(_Step):
    type: Literal["model"] = "model"
    turn: ModelTurn
    cost_usd: float = 0.0


class ToolStep(_Step):
    type: Literal["tool"] = "tool"
    call_id: str
    name: str
    output: str
    ok: bool = True
    #: Set by the ``finish`` tool: the agent's summary, and the end of the loop.
    finished: bool = False


class NoteStep(_Step):
    """A message from us to the model: a correction after an unusable turn."""

    type: Literal["note"] = "note"
    text: str


class TrimStep(_Step):
    """Tool results of steps before ``upto`` are replaced by :data:`TRIMMED`."""

    type: Literal["trim"] = "trim"
    upto: int


Step = Annotated[
    PromptStep | ModelStep | ToolStep | NoteStep | TrimStep, Field(discriminator="type")
]
STEP = TypeAdapter(Step)


def trim_floor(steps: Sequence[Step]) -> int:
    """Index below which tool output has been trimmed away."""
    return max((s.upto for s in steps if isinstance(s, TrimStep)), default=0)


def visible_output(steps: Sequence[Step], index: int) -> str:
    step = steps[index]
    assert isinstance(step, ToolStep)
    return TRIMMED if index < trim_floor(steps) else step.output


def pending_calls(steps: Sequence[Step]) -> list[ToolCall]:
    """Tool calls of the last model turn that have no recorded result yet."""
    for index in range(len(steps) - 1, -1, -1):
        step = steps[index]
        if isinstance(step, ModelStep):
            answered = {s.call_id for s in steps[index + 1 :] if isinstance(s, ToolStep)}
            return [c for c in step.turn.tool_calls if c.id not in answered]
    return []


def finished(steps: Sequence[Step]) -> ToolStep | None:
    return next((s for s in steps if isinstance(s, ToolStep) and s.finished), None)


def next_trim(steps: Sequence[Step], keep_recent: int = 2) -> TrimStep | None:
    """A trim that removes the older half of the tool output still shown
    (never the last ``keep_recent`` results); ``None`` when nothing is left."""
    floor = trim_floor(steps)
    shown = [i for i, s in enumerate(steps) if isinstance(s, ToolStep) and i >= floor and s.output]
    candidates = shown[:-keep_recent] if keep_recent else shown
    if not candidates:
        return None
    cut = candidates[(len(candidates) - 1) // 2]
    return TrimStep(upto=cut + 1)


def redact(text: str, secrets: KnownSecrets | Iterable[str]) -> str:
    """``text`` without the given secrets or anything shaped like a well-known token."""
    known = secrets if isinstance(secrets, KnownSecrets) else KnownSecrets(secrets)
    return known.redact(text)


def render(steps: Sequence[Step]) -> str:
    """The human transcript: every turn and every tool result, in order."""
    out: list[str] = []
    for number, step in enumerate(steps):
        if isinstance(step, PromptStep):
            out += [f"### {number} system\n{step.system}", f"### {number} user\n{step.user}"]
        elif isinstance(step, ModelStep):
            turn = step.turn
            head = (
                f"### {number} model ({turn.input_tokens} in, {turn.output_tokens} out, "
                f"${step.cost_usd:.4f}, stop {turn.stop_reason or '-'})"
            )
            lines = [head]
            if turn.text:
                lines.append(turn.text)
            if turn.refusal:
                lines.append(f"[refusal] {turn.refusal}")
            lines += [f"-> {c.name}({c.arguments}) [{c.id}]" for c in turn.tool_calls]
            out.append("\n".join(lines))
        elif isinstance(step, ToolStep):
            status = "ok" if step.ok else "error"
            out.append(f"### {number} tool {step.name} [{step.call_id}] {status}\n{step.output}")
        elif isinstance(step, NoteStep):
            out.append(f"### {number} note to the model\n{step.text}")
        else:
            out.append(f"### {number} trimmed tool output of steps before {step.upto}")
    return "\n\n".join(out) + "\n"

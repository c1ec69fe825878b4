"""The providers' request and response shapes for tool use (streaming off).

OpenAI-compatible chat completions: ``tools: [{"type": "function", ...}]``,
an assistant message with ``tool_calls`` (arguments as JSON text) answered by
one ``{"role": "tool", "tool_call_id": ...}`` message per call.

Anthropic Messages: ``tools: [{"name", "description", "input_schema"}]``,
assistant ``tool_use`` content blocks answered by ``tool_result`` blocks in
the next user message; roles alternate strictly, so consecutive user content
is merged into one message.

Both are pure functions of the recorded steps: no I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.agent.steps import (
    ModelStep,
    ModelTurn,
    NoteStep,
    PromptStep,
    Step,
    ToolCall,
    ToolStep,
    visible_output,
)
from app.agent.tools import ToolSpec


def openai_body(
    model: str, steps: Sequence[Step], tools: Sequence[ToolSpec], max_tokens: int
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for index, step in enumerate(steps):
        if isinstance(step, PromptStep):
            messages.append({"role": "system", "content": step.system})
            messages.append({"role": "user", "content": step.user})
        elif isinstance(step, ModelStep):
            message: dict[str, Any] = {"role": "assistant", "content": step.turn.text or None}
            if step.turn.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in step.turn.tool_calls
                ]
            elif not step.turn.text:
                message["content"] = step.turn.refusal or ""
            messages.append(message)
        elif isinstance(step, ToolStep):
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": step.call_id,
                    "content": visible_output(steps, index),
                }
            )
        elif isinstance(step, NoteStep):
            messages.append({"role": "user", "content": step.text})
    return {
        "model": model,
        "messages": messages,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in tools
        ],
        "max_tokens": max_tokens,
    }


def parse_openai(body: Any) -> ModelTurn:
    choice = body["choices"][0]
    message = choice["message"]
    calls = [
        ToolCall(
            id=str(call["id"]),
            name=str(call["function"]["name"]),
            arguments=str(call["function"].get("arguments") or ""),
        )
        for call in message.get("tool_calls") or []
    ]
    usage = body.get("usage") or {}
    return ModelTurn(
        text=str(message.get("content") or ""),
        tool_calls=calls,
        refusal=message.get("refusal") or None,
        stop_reason=str(choice.get("finish_reason") or ""),
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
    )


def anthropic_body(
    model: str, steps: Sequence[Step], tools: Sequence[ToolSpec], max_tokens: int
) -> dict[str, Any]:
    system = ""
    messages: list[dict[str, Any]] = []

    def user(block: dict[str, Any]) -> None:
        # Roles must alternate: tool results and notes join one user message.
        if messages and messages[-1]["role"] == "user":
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": "user", "content": [block]})

    for index, step in enumerate(steps):
        if isinstance(step, PromptStep):
            system = step.system
            user({"type": "text", "text": step.user})
        elif isinstance(step, ModelStep):
            content: list[dict[str, Any]] = []
            if step.turn.text or not step.turn.tool_calls:
                content.append(
                    {"type": "text", "text": step.turn.text or step.turn.refusal or "(no answer)"}
                )
            content += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.parsed() or {}}
                for c in step.turn.tool_calls
            ]
            messages.append({"role": "assistant", "content": content})
        elif isinstance(step, ToolStep):
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": step.call_id,
                "content": visible_output(steps, index),
            }
            if not step.ok:
                block["is_error"] = True
            user(block)
        elif isinstance(step, NoteStep):
            user({"type": "text", "text": step.text})
    return {
        "model": model,
        "system": system,
        "messages": messages,
        "tools": [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in tools
        ],
        "max_tokens": max_tokens,
    }


def parse_anthropic(body: Any) -> ModelTurn:
    text: list[str] = []
    calls: list[ToolCall] = []
    for block in body["content"]:
        if block.get("type") == "text":
            text.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append(
                ToolCall(
                    id=str(block["id"]),
                    name=str(block["name"]),
                    arguments=json.dumps(block.get("input", {})),
                )
            )
    usage = body.get("usage") or {}
    stop = str(body.get("stop_reason") or "")
    joined = "".join(text)
    return ModelTurn(
        text=joined,
        tool_calls=calls,
        refusal=(joined or "the model refused") if stop == "refusal" else None,
        stop_reason=stop,
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
    )

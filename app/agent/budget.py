"""Budgets of the built-in agent: turns, tool calls, tokens and cost.

Checked before every model call, against this attempt's spending and
against the run's (earlier repair attempts plus this one), so a loop never
starts a call it may not pay for. Cost comes from the operator's price
table (US dollars per million input and output tokens, by model); a model
without a price costs nothing here, so a cost cap binds only priced models
(the token cap still binds).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field


class Price(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: US dollars per million input (prompt) tokens.
    input_per_mtok: float = Field(ge=0)
    #: US dollars per million output (completion) tokens.
    output_per_mtok: float = Field(ge=0)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


class Usage(BaseModel):
    """What an attempt (or a run) spent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turns: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            turns=self.turns + other.turns,
            tool_calls=self.tool_calls + other.tool_calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=round(self.cost_usd + other.cost_usd, 6),
        )


class Caps(BaseModel):
    """Upper bounds; ``None`` is unbounded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turns: int | None = Field(default=None, ge=1)
    tool_calls: int | None = Field(default=None, ge=1)
    tokens: int | None = Field(default=None, ge=1)
    cost_usd: float | None = Field(default=None, gt=0)

    def exceeded(self, usage: Usage) -> str | None:
        """Which cap ``usage`` has reached, as a sentence; ``None`` if none."""
        checks: list[tuple[str, float | None, float]] = [
            ("turn", self.turns, usage.turns),
            ("tool call", self.tool_calls, usage.tool_calls),
            ("token", self.tokens, usage.tokens),
            ("cost", self.cost_usd, usage.cost_usd),
        ]
        for name, cap, spent in checks:
            if cap is not None and spent >= cap:
                shown = f"${spent:.4f} of ${cap:.2f}" if name == "cost" else f"{spent:g} of {cap:g}"
                return f"{name} cap reached ({shown})"
        return None


class LoopBudget(BaseModel):
    """The operator's caps, per repair attempt and per run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt: Caps = Caps(turns=40, tool_calls=120, tokens=2_000_000)
    run: Caps = Caps(turns=120, tool_calls=360, tokens=6_000_000)

    def check(self, attempt: Usage, earlier_in_run: Usage) -> str | None:
        """Why no further model call may start, or ``None`` when one may."""
        reason = self.attempt.exceeded(attempt)
        if reason:
            return f"attempt {reason}"
        reason = self.run.exceeded(earlier_in_run + attempt)
        return f"run {reason}" if reason else None


def price_of(prices: Mapping[str, Price], model: str) -> Price | None:
    """The model's price: exact name, else the longest matching prefix
    (``gpt-4o`` prices ``gpt-4o-2024-08-06``)."""
    if model in prices:
        return prices[model]
    matches = [name for name in prices if model.startswith(name)]
    return prices[max(matches, key=len)] if matches else None

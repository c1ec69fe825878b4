"""Fake activities under the real names, with the real retry policies and
timeouts, answering from canned results, functions or a recorded history."""

from __future__ import annotations

import inspect
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from app.engine._activity_context import ActivityContext
from app.engine._errors import PermanentError
from app.engine._registry import ActivityDefn, Registry

#: What a fake does when called: a function of the call (sync or async)
#: returning the result or raising; or a canned value; or an exception
#: (instance) to raise.
Answer = Any


class UnexpectedActivity(PermanentError):
    """The workflow called an activity the test gave no answer for."""


@dataclass(frozen=True)
class Call:
    """One attempt of one activity, as the workflow scheduled it."""

    activity: str
    input: Any
    attempt: int
    operation_id: str
    run_id: str


class _Sequence:
    """Answers in order, one per attempt; the last one is repeated."""

    def __init__(self, answers: Iterable[Answer]) -> None:
        self.answers = deque(answers)
        if not self.answers:
            raise ValueError("a sequence of answers needs at least one answer")

    def next(self) -> Answer:
        return self.answers.popleft() if len(self.answers) > 1 else self.answers[0]


class FakeActivities:
    """Per activity name: what it answers. Unanswered names fail the call
    (``UnexpectedActivity``, permanent) and are listed in :attr:`unexpected`."""

    def __init__(self) -> None:
        self._answers: dict[str, Answer] = {}
        self.calls: list[Call] = []
        self.unexpected: list[Call] = []
        #: Called with each call as it is recorded (the environment wakes its waits).
        self.listeners: list[Callable[[Call], None]] = []

    # -- building ------------------------------------------------------------------

    def on(self, name: str, answer: Answer) -> FakeActivities:
        """``answer``: a function ``(call) -> result`` (may be async, may raise),
        an exception instance to raise, or a value to return."""
        self._answers[name] = answer
        return self

    def sequence(self, name: str, *answers: Answer) -> FakeActivities:
        """One answer per call, in order (retries included); the last repeats."""
        self._answers[name] = _Sequence(answers)
        return self

    def from_history(self, history: dict[str, Any]) -> FakeActivities:
        """Answer every activity a recorded history completed with its recorded
        results, in the order recorded (per activity name). Names already given
        an answer keep it: override after or before, either works."""
        recorded: dict[str, list[Any]] = defaultdict(list)
        for event in history["events"]:
            if event["type"] == "activity_completed":
                recorded[event["data"]["activity"]].append(event["data"].get("result"))
        for name, results in recorded.items():
            self._answers.setdefault(name, _Sequence(results))
        return self

    def answers(self, name: str) -> bool:
        return name in self._answers

    # -- reading ---------------------------------------------------------------------

    def calls_to(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.activity == name]

    def inputs(self, name: str) -> list[Any]:
        return [c.input for c in self.calls_to(name)]

    def names(self) -> list[str]:
        """Activity names in call order (every attempt)."""
        return [c.activity for c in self.calls]

    def operations(self) -> list[str]:
        """The step part of each call's operation id (``...:<step>``), in order."""
        return [c.operation_id.rpartition(":")[2] for c in self.calls]

    # -- registering ------------------------------------------------------------------

    def registry(self, real: Registry) -> Registry:
        """``real``'s workflows, with every one of its activities and declared
        contracts replaced by a fake of the same name and options (no
        reconcile: a fake's effect is never uncertain unless its answer says so)."""
        fake = Registry(workflows=dict(real.workflows))
        # Declared contracts first: a registered body of the same name wins.
        for name, defn in {**real.contracts, **real.activities}.items():
            fake.add_activity(ActivityDefn(name=name, fn=self._fake(name), options=defn.options))
        return fake

    def _fake(self, name: str) -> Callable[[ActivityContext, Any], Any]:
        async def run(actx: ActivityContext, input: Any) -> Any:
            call = Call(name, input, actx.attempt, actx.operation_id, actx.run_id)
            self.calls.append(call)
            for listener in self.listeners:
                listener(call)
            if name not in self._answers:
                self.unexpected.append(call)
                raise UnexpectedActivity(f"no fake answer for activity {name!r}")
            answer = self._answers[name]
            if isinstance(answer, _Sequence):
                answer = answer.next()
            if isinstance(answer, BaseException):
                raise answer
            if callable(answer):
                answer = answer(call)
                if inspect.isawaitable(answer):
                    answer = await answer
            return answer

        return run

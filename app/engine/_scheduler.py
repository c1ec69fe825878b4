"""A tiny deterministic scheduler for workflow coroutines.

Workflow code awaits only :class:`WorkflowFuture` objects (made by ``ctx``).
The scheduler steps coroutines in FIFO order until every one of them waits on
an unresolved future; resolving futures (by applying history events) makes
their waiters runnable again. No asyncio loop, no clock, no threads: the same
history always drives the code through the same steps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any


class ForeignAwaitable(Exception):
    """Workflow code awaited something that is not a ctx future (e.g. asyncio.sleep)."""


class WorkflowFuture:
    __slots__ = ("_callbacks", "done", "error", "label", "result")

    def __init__(self, label: str = "") -> None:
        self.label = label
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self._callbacks: list[Callable[[WorkflowFuture], None]] = []

    def set_result(self, value: Any) -> None:
        if self.done:
            return
        self.done, self.result = True, value
        self._fire()

    def set_error(self, error: BaseException) -> None:
        if self.done:
            return
        self.done, self.error = True, error
        self._fire()

    def add_done_callback(self, callback: Callable[[WorkflowFuture], None]) -> None:
        if self.done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def _fire(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def __await__(self) -> Generator[WorkflowFuture, None, Any]:
        while not self.done:
            yield self
        if self.error is not None:
            raise self.error
        return self.result


class Task:
    """A workflow coroutine and the future of its outcome."""

    __slots__ = ("coro", "future", "name", "waiting_on")

    def __init__(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        self.coro = coro
        self.name = name
        self.future = WorkflowFuture(label=f"task {name}")
        self.waiting_on: WorkflowFuture | None = None


class Scheduler:
    def __init__(self) -> None:
        self._ready: deque[tuple[Task, BaseException | None]] = deque()
        self.tasks: list[Task] = []

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> Task:
        task = Task(coro, name)
        self.tasks.append(task)
        self._ready.append((task, None))
        return task

    def throw(self, task: Task, error: BaseException) -> bool:
        """Raise ``error`` inside a blocked task at its current await."""
        if task.future.done or task.waiting_on is None:
            return False
        task.waiting_on = None
        self._ready.append((task, error))
        return True

    def run_until_blocked(self, stop: Callable[[], bool] = lambda: False) -> None:
        while self._ready and not stop():
            task, error = self._ready.popleft()
            self._step(task, error)

    def _step(self, task: Task, error: BaseException | None) -> None:
        try:
            yielded = task.coro.send(None) if error is None else task.coro.throw(error)
        except StopIteration as stop:
            task.future.set_result(stop.value)
            return
        except BaseException as exc:
            task.future.set_error(exc)
            return
        if not isinstance(yielded, WorkflowFuture):
            task.coro.close()
            task.future.set_error(
                ForeignAwaitable(
                    f"workflow awaited {yielded!r}; only ctx futures may be awaited "
                    "(use ctx.sleep, ctx.activity, ctx.wait_signal, ctx.gather)"
                )
            )
            return
        task.waiting_on = yielded

        def wake(future: WorkflowFuture, task: Task = task) -> None:
            # A task that was thrown into (cancellation) no longer waits here.
            if task.waiting_on is future:
                task.waiting_on = None
                self._ready.append((task, None))

        yielded.add_done_callback(wake)

    def close(self) -> None:
        for task in self.tasks:
            if not task.future.done:
                task.coro.close()

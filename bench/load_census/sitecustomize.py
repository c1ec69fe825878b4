"""Per-process counters for ``python -m bench.load --census`` (never part of
the product): ``bench.load`` puts this directory first on the ``PYTHONPATH``
of the processes it starts and names a directory in ``REPAIRBOT_LOAD_CENSUS``.
Only ``repairbot`` processes (``python -m app.main.cli``) count; everything
else (the emulator, git, the sandbox's commands) starts as usual.

Counted: subprocesses started (``subprocess.Popen`` audit events, by program;
git by subcommand) and the CPU each used with the descendants it waited for
(milliseconds, from ``wait4``'s resource usage), SQL statements (by verb and
table), HTTP requests sent by httpx clients (GitHub's REST API, by method
and path with ids masked, and again by the activity sending it: ``via``),
calls handed to the store's threads (by function), reconciler passes, and
hand-offs between threads: threads started (by
name, numbers masked), work submitted to and shutdowns of
``ThreadPoolExecutor``s (by thread name prefix; ``asyncio`` is the loop's
default executor) and ``Condition.notify`` calls (by the first caller
outside ``threading``: a future's result, a queue, a thread's start). Written
to ``<dir>/<pid>.json`` every two seconds and at exit; when ``<dir>/START``
appears (the benchmark's first label) the counts so far are kept in
``<dir>/<pid>.base.json``, so start-up is left out.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from typing import Any

DIRECTORY = os.environ.get("REPAIRBOT_LOAD_CENSUS")
_counts: Counter[str] = Counter()
_lock = threading.Lock()


def _bump(key: str) -> None:
    with _lock:
        _counts[key] += 1


def _program(argv: Any) -> str:
    args = [str(a) for a in argv] if isinstance(argv, (list, tuple)) else [str(argv)]
    if args[:2] == ["/bin/sh", "-c"] and args[3:4] == ["repairbot-held"]:
        args = args[4:]  # a sandboxed command starts held (app/sandbox/hold.py)
    name = os.path.basename(args[0]) if args else "?"
    if name != "git":
        return name
    skip = False
    for arg in args[1:]:
        if skip:
            skip = False
        elif arg in ("-c", "-C"):
            skip = True
        elif not arg.startswith("-"):
            return f"git {arg}"
    return "git"


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen":
        _bump(f"process {_program(args[1])}")


#: Program names of the children started here and not yet reaped, by pid.
_children: dict[int, str] = {}


def _note_child(popen_init: Any) -> Any:
    def init(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        popen_init(self, args, *rest, **kwargs)
        with _lock:
            _children[self.pid] = _program(args)

    return init


def _reaping(waitpid: Any) -> Any:
    """``os.waitpid`` through ``wait4``, keeping the reaped child's CPU (its
    own and that of the descendants it waited for: the sandbox's commands
    under ``bwrap``). ``subprocess`` and asyncio's child watchers reap with
    ``os.waitpid``."""

    def wait(pid: int, options: int) -> tuple[int, int]:
        if pid <= 0:
            return waitpid(pid, options)  # type: ignore[no-any-return]
        reaped, status, usage = os.wait4(pid, options)
        if reaped:
            with _lock:
                program = _children.pop(reaped, None)
                if program is not None:
                    ms = round((usage.ru_utime + usage.ru_stime) * 1000)
                    _counts[f"child-ms {program}"] += ms
                    _counts["child-ms all"] += ms
        return reaped, status

    return wait


def _hook_children() -> None:
    import subprocess

    os.waitpid = _reaping(os.waitpid)
    # ``Popen._internal_poll`` holds ``os.waitpid`` as a default argument.
    poll = subprocess.Popen._internal_poll  # type: ignore[attr-defined]
    defaults = list(poll.__defaults__)
    defaults[1] = os.waitpid
    poll.__defaults__ = tuple(defaults)
    subprocess.Popen.__init__ = _note_child(subprocess.Popen.__init__)  # type: ignore[method-assign]


_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE)\s+(\w+)", re.I)
_MASKS = (
    (re.compile(r"/repos/[^/]+/[^/]+"), "/repos/{repo}"),
    (re.compile(r"(/git/(?:ref|refs|matching-refs)|/contents|/branches)/.*"), r"\1/{path}"),
    (re.compile(r"/[0-9a-f]{40}"), "/{sha}"),
    (re.compile(r"/orgs/[^/]+"), "/orgs/{org}"),
    (re.compile(r"/users/[^/]+"), "/users/{user}"),
    (re.compile(r"/collaborators/[^/]+"), "/collaborators/{user}"),
    (re.compile(r"/\d+"), "/{n}"),
)


def _endpoint(path: str) -> str:
    for pattern, mask in _MASKS:
        path = pattern.sub(mask, path)
    return path


def _token_scope(body: bytes) -> str:
    """What an installation token was minted for, without naming the repository."""
    asked = json.loads(body) if body else {}
    where = "one repository" if asked.get("repositories") else "the installation"
    permissions = ",".join(f"{k}:{v}" for k, v in sorted(asked.get("permissions", {}).items()))
    return f"{where}, {permissions or 'its permissions'}"


def _activity() -> str:
    """The activity (or workflow) sending a request, from the log context the
    worker binds at the top of every job; ``-`` outside one (token mints for
    git, the App's own requests made before an activity binds)."""
    logs = sys.modules.get("app.logs")
    fields = logs._context.get() if logs is not None else None
    if not fields:
        return "-"
    return str(fields.get("activity") or fields.get("workflow") or "-")


_DIGITS = re.compile(r"\d+")


def _thread_kind(name: str) -> str:
    """A thread's name without its numbers (``asyncio_3`` -> ``asyncio_N``,
    ``waitpid-1234`` -> ``waitpid-N``, ``Thread-7 (relay)`` -> ``Thread-N (relay)``)."""
    return _DIGITS.sub("N", name)


def _notifier(frame: Any) -> str:
    """Who notified: the first caller outside ``threading`` (``Event.set``
    and ``notify_all`` notify on a caller's behalf), as module.function."""
    while frame is not None and frame.f_globals.get("__name__") == "threading":
        frame = frame.f_back
    if frame is None:
        return "threading (a new thread's start)"
    return f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_name}"


def _function(fn: Any, args: tuple[Any, ...]) -> str:
    """The function ``asyncio.to_thread`` or ``run_in_executor`` handed over
    (``to_thread`` wraps it in ``functools.partial(Context.run, func, ...)``)."""
    while hasattr(fn, "func"):
        args, fn = tuple(fn.args), fn.func
    if getattr(fn, "__qualname__", "") == "Context.run" and args:
        fn = args[0]
        while hasattr(fn, "func"):
            fn = fn.func
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}.{getattr(fn, '__qualname__', repr(fn))}"


def _hook_threads() -> None:
    """Count threads started, work handed to executors, executors shut down
    and condition notifications (every ``concurrent.futures`` result and
    every ``Event.set`` notifies)."""
    from concurrent.futures import ThreadPoolExecutor

    start = threading.Thread.start
    notify = threading.Condition.notify
    submit = ThreadPoolExecutor.submit
    shutdown = ThreadPoolExecutor.shutdown

    def counted_start(self: threading.Thread) -> None:
        _bump(f"thread {_thread_kind(self.name)}")
        start(self)

    def counted_notify(self: threading.Condition, n: int = 1) -> None:
        _bump(f"handoff notify {_notifier(sys._getframe(1))}")
        notify(self, n)

    def executor(pool: ThreadPoolExecutor) -> str:
        return _thread_kind(getattr(pool, "_thread_name_prefix", "") or "ThreadPoolExecutor")

    def counted_submit(self: ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        pool = executor(self)
        _bump(f"handoff submit {pool}")
        if pool == "asyncio":  # the loop's default executor: what was handed over
            _bump(f"handoff to-thread {_function(fn, args)}")
        return submit(self, fn, *args, **kwargs)

    def counted_shutdown(self: ThreadPoolExecutor, *args: Any, **kwargs: Any) -> Any:
        _bump(f"handoff shutdown {executor(self)}")
        return shutdown(self, *args, **kwargs)

    threading.Thread.start = counted_start  # type: ignore[method-assign]
    threading.Condition.notify = counted_notify  # type: ignore[method-assign]
    ThreadPoolExecutor.submit = counted_submit  # type: ignore[method-assign]
    ThreadPoolExecutor.shutdown = counted_shutdown  # type: ignore[method-assign]


def _hook_libraries() -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def statement(_c: Any, _cur: Any, sql: str, *_args: Any) -> None:
        verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else "?"
        table = _TABLE.search(sql)
        _bump(f"sql {verb} {table.group(1) if table else ''}".rstrip())

    event.listen(Engine, "before_cursor_execute", statement)

    import httpx

    send = httpx.AsyncClient.send

    async def counted(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> Any:
        _bump(f"http {request.method} {_endpoint(request.url.path)}")
        _bump(f"via {_activity()} {request.method} {_endpoint(request.url.path)}")
        if request.url.path.endswith("/access_tokens"):
            _bump(f"token {_token_scope(request.content)}")
        return await send(self, request, **kwargs)

    httpx.AsyncClient.send = counted  # type: ignore[method-assign]


def _counting_store_calls(run: Any) -> Any:
    async def counted_run(self: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        inner = fn
        while hasattr(inner, "func"):  # functools.partial
            inner = inner.func
        _bump(f"store {getattr(inner, '__qualname__', repr(inner))}")
        return await run(self, fn, *args, **kwargs)

    return counted_run


def _counting_passes(run_once: Any) -> Any:
    async def counted_pass(self: Any) -> Any:
        _bump("reconciler pass")
        return await run_once(self)

    return counted_pass


def _hook_engine() -> None:
    """Wrap the store's thread hand-off and the reconciler's pass once the
    worker has imported them."""
    done: set[str] = set()
    deadline = time.monotonic() + 120  # the web process imports neither
    while len(done) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        threads = sys.modules.get("app.engine._store.async_store")
        if threads is not None and "threads" not in done:
            threads.StoreThreads.run = _counting_store_calls(threads.StoreThreads.run)
            done.add("threads")
        reconciler = sys.modules.get("app.engine._reconciler")
        if reconciler is not None and "reconciler" not in done:
            reconciler.Reconciler.run_once = _counting_passes(reconciler.Reconciler.run_once)
            done.add("reconciler")


def _write(path: str) -> None:
    with _lock:
        data: dict[str, Any] = dict(_counts)
    data["_argv"] = " ".join(sys.orig_argv)
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def _keep_writing(directory: str) -> None:
    """The counts at ``START`` (the base), then every 2 s, and at once when
    the benchmark asks (``FLUSH`` newer than the last write): a process
    stopped before its ``atexit`` ran leaves its counts as of that moment."""
    path = os.path.join(directory, f"{os.getpid()}.json")
    start = os.path.join(directory, "START")
    flush = os.path.join(directory, "FLUSH")
    based = False
    written = 0.0
    while True:
        time.sleep(0.05)
        if not based:
            if os.path.exists(start):
                _write(os.path.join(directory, f"{os.getpid()}.base.json"))
                based = True
            continue
        try:
            asked = os.stat(flush).st_mtime > written
        except FileNotFoundError:
            asked = False
        if asked or time.time() - written >= 2.0:
            written = time.time()
            _write(path)


def _start(directory: str) -> None:
    sys.addaudithook(_audit)
    _hook_children()
    _hook_libraries()
    _hook_threads()
    threading.Thread(target=_hook_engine, daemon=True).start()
    threading.Thread(target=_keep_writing, args=(directory,), daemon=True).start()
    atexit.register(_write, os.path.join(directory, f"{os.getpid()}.json"))


if DIRECTORY and "app.main.cli" in sys.orig_argv:
    _start(DIRECTORY)

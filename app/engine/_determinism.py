"""Static check that workflow code does not read the clock, randomness, the
network or the disk directly.

Workflow code is replayed, so anything it reads from the outside world must
come through ``ctx`` (``ctx.now()``, ``ctx.uuid()``, activities). This check
runs when a workflow is registered, so a violation fails at start-up and in the
test suite, not in production halfway through a run.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from types import ModuleType
from typing import Any

from app.engine._errors import DeterminismViolation

#: Modules whose use inside workflow code is always an outside-world read.
FORBIDDEN_MODULES = frozenset(
    {
        "time",
        "random",
        "secrets",
        "socket",
        "subprocess",
        "os",
        "pathlib",
        "shutil",
        "httpx",
        "requests",
        "urllib",
        "aiohttp",
        "asyncio",
        "threading",
        "sqlite3",
        "sqlalchemy",
        "sqlmodel",
        "redis",
        "arq",
        "githubkit",
    }
)
#: Attribute calls that read the clock or randomness even on allowed modules.
FORBIDDEN_ATTRIBUTES = frozenset(
    {"now", "utcnow", "today", "uuid1", "uuid4", "time", "monotonic", "perf_counter", "urandom"}
)
#: Builtins that touch the disk or the process.
FORBIDDEN_BUILTINS = frozenset({"open", "input", "exec", "eval", "__import__"})


def _is_ctx(node: ast.expr) -> bool:
    """``ctx`` or ``<anything>.ctx``: the workflow context, whose now() is recorded."""
    return (isinstance(node, ast.Name) and node.id == "ctx") or (
        isinstance(node, ast.Attribute) and node.attr == "ctx"
    )


def _violations(tree: ast.AST) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names.append(node.module)
            for name in names:
                if name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"line {node.lineno}: imports {name}")
        elif isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id in FORBIDDEN_MODULES:
                found.append(f"line {node.lineno}: uses {base.id}.{node.attr}")
            elif node.attr in FORBIDDEN_ATTRIBUTES and not _is_ctx(base):
                found.append(f"line {node.lineno}: calls .{node.attr}() (use ctx.now()/ctx.uuid())")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_BUILTINS
        ):
            found.append(f"line {node.lineno}: calls {node.func.id}()")
    return found


def check_workflow_source(fn: Callable[..., Any]) -> None:
    """Raise :class:`DeterminismViolation` naming each forbidden read in ``fn``."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise DeterminismViolation(f"cannot read the source of {fn!r} to check it: {exc}") from exc
    problems = _violations(ast.parse(source))
    if problems:
        where = f"{fn.__module__}.{fn.__qualname__}"
        raise DeterminismViolation(
            f"workflow {where} reads the outside world directly:\n  " + "\n  ".join(problems)
        )


def check_module_source(module: ModuleType) -> None:
    """Check a whole workflow module: helpers and classes the workflow calls
    are workflow code too."""
    source = inspect.getsource(module)
    problems = _violations(ast.parse(source))
    if problems:
        raise DeterminismViolation(
            f"workflow module {module.__name__} reads the outside world directly:\n  "
            + "\n  ".join(problems)
        )

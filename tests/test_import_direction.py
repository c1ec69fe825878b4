"""Imports run one way: composition root -> handlers/activities/workflows ->
app.contracts -> app's libraries -> app/engine (docs/architecture.md, "Layers").
Workflows and activities meet only in app.contracts: a workflow names the
contracts it calls, an activity implements them; neither imports the other.

Read from the source (the AST of every module, imports inside functions and
``TYPE_CHECKING`` blocks included), so a violation fails here before it can
become an import cycle somewhere else.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The composition root, and the demo that assembles a whole deployment on top
#: of it (``repairbot demo``, the test stacks): they may import anything.
TOP = ("app/main/", "app/demo/")
#: Workflow definitions sit beside handlers/ and activities/.
PRODUCT = ("app/workflows/",)


def imported_modules(source: str) -> Iterator[str]:
    """Every absolute module name ``source`` imports, wherever the import is."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            # ``from app import main`` imports the package app.main.
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


def modules_in(*folders: str, skip: tuple[str, ...] = ()) -> list[Path]:
    found = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(skip):
                found.append(path)
    return found


def violations(paths: list[Path], *forbidden: str) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in paths
        for module in sorted(set(imported_modules(path.read_text())))
        if under(module, *forbidden)
    ]


def test_the_checker_sees_every_form_of_import() -> None:
    source = """
import handlers.slash
from activities import github
from app import main
def late():
    from handlers.router import Router
if TYPE_CHECKING:
    import activities.agent as agent
"""
    seen = set(imported_modules(source))
    assert {"handlers.slash", "activities", "app.main", "handlers.router"} <= seen
    assert "activities.agent" in seen
    assert under("activities.github", "activities") and not under("activitiesx", "activities")


def test_app_libraries_do_not_import_handlers_or_activities() -> None:
    libraries = modules_in("app", skip=TOP + PRODUCT)
    assert any(p.name == "pipeline.py" for p in libraries)  # the walk found the libraries
    assert violations(libraries, "handlers", "activities") == []


def test_contracts_import_neither_workflows_nor_activities_nor_handlers() -> None:
    contracts = modules_in("app/contracts")
    assert any(p.name == "github.py" for p in contracts)  # the walk found the contracts
    assert violations(contracts, "app.workflows", "activities", "handlers") == []


def test_workflows_import_contracts_not_activities_or_handlers() -> None:
    workflows = modules_in("app/workflows")
    assert any(p.name == "repair.py" for p in workflows)  # the walk found the workflows
    assert violations(workflows, "activities", "handlers") == []


def test_handlers_start_workflows_by_their_contracts_not_their_code() -> None:
    """A handler names a workflow and builds its input from app/contracts;
    the intake runs no workflow code, so it needs none of it."""
    handlers = modules_in("handlers")
    assert any(p.name == "issues.py" for p in handlers)  # the walk found the handlers
    assert violations(handlers, "app.workflows", "activities") == []


def test_activities_do_not_import_workflows() -> None:
    assert violations(modules_in("activities"), "app.workflows") == []


def test_libraries_do_not_import_the_web_edge() -> None:
    libraries = modules_in("app", skip=(*TOP, *PRODUCT, "app/web/", "app/intake/"))
    assert violations(libraries, "app.web", "app.intake") == []


def test_only_the_top_imports_the_composition_root() -> None:
    below = modules_in("app", "handlers", "activities", skip=TOP)
    assert violations(below, "app.main", "app.demo") == []


def test_the_engine_imports_only_itself_and_the_log_setup() -> None:
    engine = modules_in("app/engine")
    imports = {
        module
        for path in engine
        for module in imported_modules(path.read_text())
        if under(module, "app", "handlers", "activities")
    }
    outside = {m for m in imports if not under(m, "app.engine", "app.logs")}
    assert outside == set()


@pytest.mark.parametrize("package", ["handlers", "activities"])
def test_handlers_and_activities_do_not_import_the_web_edge(package: str) -> None:
    assert violations(modules_in(package), "app.web", "app.intake") == []


def private_engine_module(module: str) -> bool:
    """``app.engine._x`` (or anything under it); ``from app.engine import X``
    also yields "app.engine.X", a public name, which is fine."""
    parts = module.split(".")
    return parts[:2] == ["app", "engine"] and any(p.startswith("_") for p in parts[2:])


def test_product_code_uses_only_the_engines_front_door() -> None:
    """Outside app/engine, product code imports ``app.engine`` (and its test
    kit), never a private engine module; tests and benchmarks may look inside."""
    product = modules_in("app", "handlers", "activities", "emulator", skip=("app/engine/",))
    assert any(p.name == "runs_view.py" for p in product)  # the walk found product code
    reaching_in = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in product
        for module in sorted(set(imported_modules(path.read_text())))
        if private_engine_module(module)
    ]
    assert reaching_in == []


def test_the_front_door_check_catches_a_private_import() -> None:
    source = "from app.engine._runtime import Runtime\nfrom app.engine import Store\n"
    private = {m for m in imported_modules(source) if private_engine_module(m)}
    assert private == {"app.engine._runtime", "app.engine._runtime.Runtime"}


def test_the_engine_modules_are_private_but_the_front_door() -> None:
    names = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / "app/engine").iterdir()}
    public = {n for n in names if not n.startswith("_") and n != "testing"}
    assert public == set(), f"engine modules must be _private: {sorted(public)}"


def test_the_arq_parts_load_on_first_use() -> None:
    """Importing the front door does not import arq (a process that never
    uses Redis never pays for it); asking for an arq part loads it."""
    import subprocess
    import sys

    probe = (
        "import sys, app.engine as e; assert 'arq' not in sys.modules, 'arq imported eagerly';"
        "e.ArqDispatcher; assert 'arq' in sys.modules; print('ok')"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.stdout.strip() == "ok", out.stderr

"""A repository shaped like real small Python libraries, written for these tests.

What real projects do that the demo repository does not (patterns seen in
the field, no code taken from anyone):

- a ``src/`` layout, imported through pytest's ``pythonpath`` setting;
- a test suite that uses ``multiprocessing`` (a process pool);
- a test that already fails on the base commit (it needs a live service the
  sandbox does not offer), so no fix can make the whole suite pass;
- the test command uses an option of a pytest plugin that ``setup`` must
  install, from a local wheel the test builds (no internet), into
  ``$REPAIRBOT_ENV``, once per run (the default, ``setup_once``); or, with
  ``in_checkout=True``, into ``.deps/`` of the checkout with an absolute
  ``.pth`` link to ``src/`` (as ``pip install -e .`` into a ``.venv`` in the
  repository does), the package found only through that link.

The bug: ``fieldlib.stats.median`` of an even number of values returns the
upper middle value instead of the mean of the two middle values.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
import sys
import zipfile
from pathlib import Path

import app.demo

PY = sys.executable
STATS = "src/fieldlib/stats.py"
BUGGY = "    return ordered[n // 2]\n"
FIXED = "    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2\n"
#: Passes the reproduction (even lengths) and breaks odd lengths, which passed before.
WRONG = "    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2\n"
ISSUE_TITLE = "median() of an even number of values is wrong"
ISSUE_BODY = (
    "`median([1, 2, 3, 4])` returns `3`; it should be `2.5`.\n\n"
    "The regression test is `tests/test_median.py::test_even_length`."
)
#: Tests the base commit already fails (a live service the sandbox does not have).
FAILS_ON_BASE = "tests.test_live::test_against_the_live_service"
PLUGIN = "pytest-fieldseed"

FILES = {
    "pyproject.toml": """[project]
name = "fieldlib"
version = "0.1.0"
requires-python = ">=3.9"

[tool.pytest.ini_options]
pythonpath = ["src"]
""",
    "src/fieldlib/__init__.py": '"""Small statistics helpers."""\n',
    STATS: '''"""Statistics over plain lists, some of them in worker processes."""

from multiprocessing import Pool


def _square(value):
    return value * value


def sum_of_squares(values, workers=2):
    with Pool(workers) as pool:
        return sum(pool.map(_square, values))


def median(values):
    ordered = sorted(values)
    n = len(ordered)
'''
    + BUGGY,
    "tests/__init__.py": "",
    "tests/test_parallel.py": """from concurrent.futures import ProcessPoolExecutor

from fieldlib.stats import sum_of_squares


def test_sum_of_squares_in_a_pool():
    assert sum_of_squares([1, 2, 3, 4]) == 30


def test_a_process_pool_executor():
    with ProcessPoolExecutor(max_workers=2) as pool:
        assert sorted(pool.map(abs, [-3, 2, -1])) == [1, 2, 3]
""",
    "tests/test_median.py": """from fieldlib.stats import median


def test_odd_length():
    assert median([3, 1, 2]) == 2


def test_even_length():
    assert median([1, 2, 3, 4]) == 2.5
""",
    "tests/test_live.py": """import socket


def test_against_the_live_service():
    # Needs the project's staging server: not reachable from a sandbox.
    socket.create_connection(("staging.fieldlib.invalid", 443), timeout=2)
""",
    "README.md": "# fieldlib\n",
}

PLUGIN_MODULE = '''"""A pytest plugin adding --field-seed (the tests' random seed)."""


def pytest_addoption(parser):
    parser.addoption("--field-seed", type=int, default=0, help="seed for the tests")
'''


def build_plugin_wheel(wheelhouse: Path) -> Path:
    """A real wheel of the plugin, built by hand (no network, no build backend)."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    dist = "pytest_fieldseed-1.0.dist-info"
    files = {
        "pytest_fieldseed.py": PLUGIN_MODULE,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {PLUGIN}\nVersion: 1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: repairbot-tests\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/entry_points.txt": "[pytest11]\nfieldseed = pytest_fieldseed\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    path = wheelhouse / "pytest_fieldseed-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return path


#: Makes Python read the ``.pth`` files in ``.deps`` (on ``PYTHONPATH``), as in site-packages.
SITECUSTOMIZE = "import os, site; site.addsitedir(os.path.dirname(os.path.abspath(__file__)))\n"


#: What an editable install leaves: a ``.pth`` naming the checkout's ``src`` by
#: its absolute path (and a sitecustomize so that ``.deps`` on PYTHONPATH reads it).
IN_CHECKOUT_LINK = (
    "import os, pathlib; d = pathlib.Path('.deps'); "
    "(d / 'fieldlib-link.pth').write_text(os.getcwd() + '/src\\n'); "
    f"(d / 'sitecustomize.py').write_text({SITECUSTOMIZE!r})"
)


def checkout_pytest_command(*args: str) -> str:
    """pytest with ``.deps`` of the checkout (plugin and link) on its path."""
    tail = shlex.join([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args])
    return f"PYTHONPATH=.deps {tail}"


def pytest_command(*args: str) -> str:
    """pytest with the plugin installed by setup on its path, as a shell string."""
    tail = shlex.join([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args])
    return f'PYTHONPATH="$REPAIRBOT_ENV/site" {tail}'


def config(
    wheelhouse: Path,
    *,
    setup: bool = True,
    setup_once: bool | None = None,
    in_checkout: bool = False,
    reproduce: str | None = None,
    test: str | None = None,
) -> str:
    pip = [PY, "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check"]
    install = shlex.join([*pip, "--find-links", str(wheelhouse), "--target"])
    lines = []
    run = pytest_command
    if setup and in_checkout:
        link = shlex.join([PY, "-c", IN_CHECKOUT_LINK])
        lines += ["setup:", f"  - {json.dumps(f'{install} .deps {PLUGIN} && {link}')}"]
        run = checkout_pytest_command
    elif setup:
        command = f'{install} "$REPAIRBOT_ENV/site" {PLUGIN}'
        lines += ["setup:", f"  - {json.dumps(command)}"]
    if setup and setup_once is not None:
        lines.append(f"setup_once: {'true' if setup_once else 'false'}")
    reproduce = reproduce or run("--field-seed=3", "tests/test_median.py::test_even_length")
    test = test or run("--field-seed=3", "tests")
    lines += [f"reproduce: {json.dumps(reproduce)}", f"test: {json.dumps(test)}"]
    lines.append("budgets: {repair_attempts: 2, time_limit_seconds: 300}")
    return "\n".join(lines) + "\n"


def write_field_repo(folder: Path, wheelhouse: Path, **config_options: object) -> Path:
    for name, text in FILES.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    if config_options.get("in_checkout"):
        # Found only through the link setup writes, not pytest's pythonpath.
        pyproject = folder / "pyproject.toml"
        pyproject.write_text(pyproject.read_text().replace('pythonpath = ["src"]\n', ""))
        (folder / ".gitignore").write_text(".deps/\n")
    (folder / ".github").mkdir(exist_ok=True)
    (folder / ".github" / "repairbot.yml").write_text(config(wheelhouse, **config_options))  # type: ignore[arg-type]
    return folder


def agent_command(new: str = FIXED) -> list[str]:
    script = Path(app.demo.__file__).resolve().parent / "agents" / "fix_known_bug.py"
    return [PY, str(script), "--path", STATS, "--old", BUGGY.strip("\n"), "--new", new.strip("\n")]

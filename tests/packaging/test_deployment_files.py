"""The deployment files deploy what the README documents (issue 22, point 9).

Always: the Dockerfile is linted against the repository (what it copies
exists and is what the wheel packages, it runs unprivileged under tini, its
command is a real ``repairbot`` command), and fly.toml's processes are real
commands and its secrets comment names every secret the settings read.
Where a container tool can build here, the image is built and smoke-tested.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
import uuid
from pathlib import Path

import pytest

from app.config import Settings
from app.main.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
FLY = (ROOT / "fly.toml").read_text()


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined, comments dropped."""
    joined = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in DOCKERFILE.splitlines() if not line.lstrip().startswith("#")),
    )
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_what_the_dockerfile_copies_exists_and_is_what_the_wheel_packages() -> None:
    copied = [args.split()[0] for word, args in _instructions() if word == "COPY"]
    sources = [s for s in copied if not s.startswith("--from")]
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: no such path"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packaged = {
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert packaged <= set(sources), f"the wheel packages {packaged - set(sources)} not copied"


def test_the_image_runs_unprivileged_under_tini_a_real_command() -> None:
    steps = _instructions()
    users = [args for word, args in steps if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    [entry] = [args for word, args in steps if word == "ENTRYPOINT"]
    assert entry == '["tini", "--"]'
    [cmd] = [args for word, args in steps if word == "CMD"]
    argv = re.findall(r'"([^"]*)"', cmd)
    assert argv[0] == "repairbot"
    build_parser()[0].parse_args(argv[1:])  # exits (fails the test) when it is no command


def test_fly_processes_are_real_commands() -> None:
    fly = tomllib.loads(FLY)
    parser = build_parser()[0]
    commands = [*fly["processes"].values(), fly["deploy"]["release_command"]]
    for command in commands:
        argv = command.split()
        assert argv[0] == "repairbot"
        parser.parse_args(argv[1:])


def test_fly_names_every_secret_and_the_dashboard_settings() -> None:
    secrets = set(Settings().secret_env()) - {"REPAIRBOT_AGENT_API_KEYS"}
    wanted = secrets | {"GITHUB_APP_ID", "GITHUB_APP_SLUG", "GITHUB_CLIENT_ID"}
    wanted |= {"REPAIRBOT_PUBLIC_URL"}
    comment = "\n".join(line for line in FLY.splitlines() if line.startswith("#"))
    missing = {name for name in wanted if f"{name}=" not in comment}
    assert not missing, f"fly.toml's secrets comment lacks {sorted(missing)}"


def _container_tool() -> str | None:
    for tool in ("podman", "docker"):
        path = shutil.which(tool)
        if (
            path
            and subprocess.run([path, "info"], capture_output=True, check=False).returncode == 0
        ):
            return path
    return None


@pytest.mark.slow
def test_the_image_builds_and_answers_healthz() -> None:
    tool = _container_tool()
    if tool is None:
        pytest.skip("no container tool can run here (podman or docker)")
    tag = f"repairbot-test-{uuid.uuid4().hex[:8]}"
    built = subprocess.run(
        [tool, "build", "-t", tag, str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if built.returncode != 0 and re.search(
        r"(pull|resolv|registry|manifest|name resolution|dial tcp)", built.stderr, re.I
    ):
        pytest.skip(f"the base image cannot be fetched here: {built.stderr.strip()[-300:]}")
    assert built.returncode == 0, built.stderr[-4000:]
    try:
        version = subprocess.run(
            [tool, "run", "--rm", tag, "repairbot", "--version"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        assert version.stdout.startswith("repairbot ")
        refused = subprocess.run(
            [tool, "run", "--rm", tag, "repairbot", "web"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        # No webhook secret: one line, no traceback, non-zero.
        assert refused.returncode != 0 and "GITHUB_WEBHOOK_SECRET is not set" in refused.stderr
        assert "Traceback" not in refused.stderr
    finally:
        subprocess.run([tool, "rmi", "-f", tag], capture_output=True, check=False)

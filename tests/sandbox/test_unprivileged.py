"""The sandbox as an unprivileged worker builds it (the Dockerfile's user), both backends.

The test process is root here, so each test starts a child Python as a
throwaway uid (``setpriv --reuid``, no groups, no capabilities) that runs
commands through app.sandbox (tests/sandbox/unprivileged_driver.py). There
the sandbox is a user namespace: the sandbox user is uid 65534 inside and
the worker's uid to the kernel outside, so a 0600 file of the worker's is
kept away by not being mounted (or by a mask), never by its mode.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox import probes

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("unprivileged_driver.py")
KEY = "unprivileged-worker-private-key-5d2c"


def _reachable_by_others(path: str) -> bool:
    """Every directory on the way may be crossed, and the file run, by any user."""
    real = Path(os.path.realpath(path))
    if not real.is_file() or not real.stat().st_mode & 0o001:
        return False
    return all(parent.stat().st_mode & 0o001 for parent in real.parents)


def _python_for_others() -> str:
    """This interpreter if another user can run it, else the system's of the same version
    (the test's own may live under a 0700 home, like pyenv's under /root)."""
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, system):
        if _reachable_by_others(candidate):
            return os.path.realpath(candidate)
    return ""


PYTHON = _python_for_others()

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not PYTHON or shutil.which("setpriv") is None,
    reason="needs root (to become a throwaway user), setpriv, and a Python "
    f"{sys.version_info.major}.{sys.version_info.minor} other users can run",
)


@dataclass
class Worker:
    uid: int
    home: Path  # the worker's own directory (0700), like /home/repairbot
    key_file: Path  # 0600, the worker's, in a directory commands may read
    hidden_key: Path  # 0600, the worker's, outside anything the sandbox shows
    workspace: Path


def free_uid() -> int:
    taken = {int(line.split(":")[2]) for line in Path("/etc/passwd").read_text().splitlines()}
    while True:
        uid = 20000 + secrets.randbelow(20000)
        if uid not in taken:
            return uid


@pytest.fixture
def worker() -> Iterator[Worker]:
    uid = free_uid()
    home = Path(tempfile.mkdtemp(prefix="repairbot-unpriv-"))
    readable = home / "tools"  # an operator's read-only path holding a key by mistake
    readable.mkdir()
    key_file = readable / "app.pem"
    key_file.write_text(KEY)
    key_file.chmod(0o600)
    hidden_key = home / "github-app.json"
    hidden_key.write_text(KEY)
    hidden_key.chmod(0o600)
    workspace = home / "ws"
    workspace.mkdir()
    for path in (home, readable, key_file, hidden_key, workspace):
        os.chown(path, uid, uid)
    home.chmod(0o711)  # others may pass (bwrap needs to reach the mounts), not list
    try:
        yield Worker(uid, home, key_file, hidden_key, workspace)
    finally:
        shutil.rmtree(home, ignore_errors=True)


async def as_worker(worker: Worker, mode: str, commands: dict[str, Any], **spec: Any) -> Any:
    """Run ``commands`` (name -> {"shell", "network"}) through app.sandbox as ``worker``."""
    payload = {
        "mode": mode,
        "workspace": str(worker.workspace),
        "read_only": [str(worker.key_file.parent)],
        "hidden": [str(worker.key_file), str(worker.hidden_key)],
        "commands": commands,
        **spec,
    }
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(worker.home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]]),
    }
    setpriv = [
        "setpriv", f"--reuid={worker.uid}", f"--regid={worker.uid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all",
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *setpriv, PYTHON, str(DRIVER), json.dumps(payload),
        cwd=worker.home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


@pytest.fixture(params=["bwrap", "unshare"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_the_workers_0600_key_files_are_not_readable(worker: Worker, mode: str) -> None:
    commands = {
        "shown": {"shell": f"cat {worker.key_file}; echo; id -u; ls -la {worker.key_file.parent}"},
        "absent": {"shell": f"cat {worker.hidden_key}; ls {worker.home}"},
        "unmask": {"shell": f"umount {worker.key_file}; cat {worker.key_file}"},
    }
    got = await as_worker(worker, mode, commands)
    assert all(r["backend"] == mode for r in got.values())
    assert all(KEY not in r["output"] for r in got.values()), got
    assert "65534" in got["shown"]["output"].split(), got["shown"]  # not the worker uid
    assert "No such file or directory" in got["absent"]["output"]


async def test_no_nested_namespace_no_capability_seccomp_on(worker: Worker, mode: str) -> None:
    (worker.workspace / "ordinary.py").write_text(probes.ORDINARY)
    commands = {
        "unshare": {"shell": "unshare -U true; echo rc=$?"},
        "syscalls": {"shell": f"{PYTHON} -c '{probes.SYSCALLS}'"},
        "identity": {"shell": f"{PYTHON} -c '{probes.IDENTITY}'"},
        "ordinary": {"shell": f"{PYTHON} ordinary.py"},
    }
    got = await as_worker(worker, mode, commands)
    assert "rc=1" in got["unshare"]["output"], got["unshare"]
    syscalls = json.loads(got["syscalls"]["output"].splitlines()[-1])
    assert syscalls["unshare"] == syscalls["keyctl"] == syscalls["bpf"] == 1
    assert syscalls["userfaultfd"] == syscalls["perf_event_open"] == syscalls["mount"] == 1
    assert syscalls["clone"] == 1 and syscalls["clone3"] == 38
    identity = json.loads(got["identity"]["output"].splitlines()[-1])
    assert identity["uid"] == 65534 and identity["CapEff"] == "0000000000000000"
    assert identity["NoNewPrivs"] == "1" and identity["Seccomp"] == "2"
    ordinary = json.loads(got["ordinary"]["output"].splitlines()[-1])
    assert ordinary["pool"] == 285 and ordinary["fork"] == 7


async def test_bwrap_disables_nested_user_namespaces_even_without_the_filter(
    worker: Worker,
) -> None:
    """The guard alone (``--disable-userns``): the seccomp filter is swapped for allow-all."""
    commands = {"unshare": {"shell": "unshare -U true; echo rc=$?"}}
    got = await as_worker(worker, "bwrap", commands, without_seccomp=True)
    assert "No space left on device" in got["unshare"]["output"], got
    assert "rc=1" in got["unshare"]["output"]


async def test_a_networked_step_reaches_the_registry_and_nothing_else(
    worker: Worker, mode: str
) -> None:
    got_requests: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got_requests.append(await reader.read(4096))
        writer.write(b"HTTP/1.0 200 OK\r\n\r\nregistry-ok")
        await writer.drain()
        writer.close()

    registry = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = registry.sockets[0].getsockname()[1]
    fetch = f'import urllib.request as u; print(u.urlopen("http://127.0.0.1:{port}/").read())'
    direct = (
        "import socket\n"
        f"for port in (5432, 6379, {port}):\n"
        '    try: socket.create_connection(("127.0.0.1", port), 3); print("REACHED", port)\n'
        '    except OSError: print("blocked", port)\n'
    )
    commands = {
        "fetch": {"shell": f"{PYTHON} -c '{fetch}'", "network": True},
        "direct": {"shell": f"{PYTHON} -c '{direct}'", "network": True},
    }
    try:
        got = await as_worker(worker, mode, commands, allow_private=[f"127.0.0.1:{port}"])
    finally:
        registry.close()
    assert "registry-ok" in got["fetch"]["output"], got["fetch"]
    assert got["direct"]["output"].split().count("blocked") == 3, got["direct"]
    assert len(got_requests) == 1


async def test_the_disk_quota_holds_for_an_unprivileged_worker(worker: Worker, mode: str) -> None:
    """The Dockerfile's worker: no root, so no loop device or project quota,
    yet the watcher, RLIMIT_FSIZE and the tmpfs size all hold."""
    fill = 'i=0; while :; do head -c 1048576 /dev/zero > "$HOME/f$i"; i=$((i+1)); done'
    out = await as_worker(
        worker,
        mode,
        {  # in this order: a workspace over its quota stops every later command at once
            "tmp": {"shell": "head -c 33554432 /dev/zero > /tmp/x || echo refused"},
            "sparse": {"shell": 'truncate -s 1G "$TMPDIR/sparse"'},
            "fill": {"shell": fill},
            "after": {"shell": "true"},
        },
        quota_mib=16,
    )
    reason = "the workspace exceeded its 16 MiB disk quota"
    assert out["fill"]["quota_exceeded"] == reason, out["fill"]
    assert out["sparse"]["quota_exceeded"] == reason, out["sparse"]
    assert "No space left on device" in out["tmp"]["output"]
    assert "refused" in out["tmp"]["output"]
    assert out["after"]["quota_exceeded"] == reason


async def test_a_directory_hidden_from_the_quota_stops_the_command(
    worker: Worker, mode: str
) -> None:
    """Unprivileged, the worker is the sandbox user to the kernel: ``chmod 300``
    leaves a directory writable by the command but unlistable by the watcher.
    What cannot be measured counts as over (fail closed)."""
    hide = 'mkdir "$HOME/hidden" && chmod 300 "$HOME/hidden" && sleep 60'
    out = await as_worker(worker, mode, {"hide": {"shell": hide}}, quota_mib=16)
    assert out["hide"]["quota_exceeded"] == (
        "the workspace holds a directory its disk quota cannot read"
    ), out["hide"]

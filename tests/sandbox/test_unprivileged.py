"""The sandbox as an unprivileged worker builds it (the Dockerfile's user), both backends.

The test process is root here, so each test creates a throwaway user
(``useradd``, which also gives it a subordinate uid and gid range in
/etc/subuid and /etc/subgid, as on any Debian machine) and starts a child
Python as that user (``setpriv --reuid``, no groups, no capabilities) that
runs commands through app.sandbox (tests/sandbox/unprivileged_driver.py).
There the sandbox user is uid 65534 of a user namespace and the worker's
first subordinate uid outside (app/sandbox/userns.py): not the worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox import probes
from tests.unprivileged_user import PYTHON, UNAVAILABLE, as_user, python_env, throwaway_user

DRIVER = Path(__file__).with_name("unprivileged_driver.py")
KEY = "unprivileged-worker-private-key-5d2c"

pytestmark = pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE)


@dataclass
class Worker:
    uid: int
    home: Path  # the worker's own directory (0700), like /home/repairbot
    key_file: Path  # 0600, the worker's, in a directory commands may read, masked
    exposed_key: Path  # 0600, the worker's, in that directory, not masked
    hidden_key: Path  # 0600, the worker's, outside anything the sandbox shows
    workspace: Path


def make_worker(uid: int) -> Worker:
    home = Path(tempfile.mkdtemp(prefix="repairbot-unpriv-"))
    readable = home / "tools"  # an operator's read-only path holding a key by mistake
    readable.mkdir()
    key_file = readable / "app.pem"
    exposed_key = readable / "exposed.pem"  # not masked: only its mode protects it
    hidden_key = home / "github-app.json"
    for key in (key_file, exposed_key, hidden_key):
        key.write_text(KEY)
        key.chmod(0o600)
    workspace = home / "ws"
    workspace.mkdir()
    for path in (home, readable, key_file, exposed_key, hidden_key, workspace):
        os.chown(path, uid, uid)
    home.chmod(0o711)  # others may pass (bwrap needs to reach the mounts), not list
    return Worker(uid, home, key_file, exposed_key, hidden_key, workspace)


@pytest.fixture
def worker() -> Iterator[Worker]:
    with throwaway_user() as uid:
        made = make_worker(uid)
        try:
            yield made
        finally:
            shutil.rmtree(made.home, ignore_errors=True)


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
    proc = await asyncio.create_subprocess_exec(
        *as_user(worker.uid), PYTHON, str(DRIVER), json.dumps(payload),
        cwd=worker.home, env=python_env(worker.home),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, err.decode()
    got = json.loads(out)
    assert "unavailable" not in got or spec.get("may_refuse"), got["unavailable"]
    return got


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


async def test_a_0600_file_of_the_worker_is_unreadable_even_when_mounted(
    worker: Worker, mode: str
) -> None:
    """Not masked, in a path the sandbox shows: only its mode protects it, because
    the sandbox user is a subordinate uid outside, not the worker."""
    commands = {
        "read": {"shell": f"cat {worker.exposed_key}; echo; id -u; stat -c %u {worker.home}"},
    }
    got = await as_worker(worker, mode, commands)
    read = got["read"]
    assert read["backend"] == mode
    assert KEY not in read["output"], read
    assert "Permission denied" in read["output"], read
    assert "65534" in read["output"].split(), read


async def test_the_sandbox_writes_the_workspace_and_the_worker_gets_it_back(
    worker: Worker, mode: str
) -> None:
    """The command may make files only it could read (0700 directory, 0000 and
    0600 files); afterwards they are the worker's: readable and removable."""
    (worker.workspace / "tracked.txt").write_text("before\n")
    os.chown(worker.workspace / "tracked.txt", worker.uid, worker.uid)
    shell = (
        "echo after >> tracked.txt && mkdir -m 0700 out && echo secret > out/private "
        "&& chmod 0000 out/private && echo mine > out/mine && chmod 0600 out/mine "
        "&& mkdir -m 0000 out/locked && ln -s /etc/passwd out/link && chmod 0700 . && echo ok"
    )
    got = await as_worker(
        worker,
        mode,
        {"write": {"shell": shell}},
        read_back=["tracked.txt", "out/private", "out/mine"],
        remove="out",
    )
    assert got["write"]["output"].strip() == "ok", got["write"]
    assert got["read_back"] == {
        "tracked.txt": {"text": "before\nafter\n", "uid": worker.uid},
        "out/private": {"text": "secret\n", "uid": worker.uid},
        "out/mine": {"text": "mine\n", "uid": worker.uid},
    }
    assert got["removed"] is True
    assert worker.workspace.stat().st_uid == worker.uid
    assert os.stat("/etc/passwd").st_uid == 0  # the link was not followed


async def test_a_workspace_a_killed_worker_left_behind_is_still_removed(
    worker: Worker, mode: str
) -> None:
    """The worker died during the command, so nothing handed the files back:
    removing the workspace reclaims them in a namespace of the same mapping."""
    shell = (
        "mkdir -m 0700 left && echo x > left/f && chmod 0000 left/f "
        "&& mkdir -m 0000 left/locked && echo ok"
    )
    got = await as_worker(
        worker,
        mode,
        {"write": {"shell": shell}},
        killed_before_hand_back=True,
        remove_workspace=".",  # the command's directory: handed over, never back
    )
    assert got["write"]["output"].strip() == "ok", got["write"]
    assert got["left_owner"] not in (worker.uid, 0)  # the sandbox user's, outside
    assert got["workspace_removed"] is True, got


async def test_without_a_subordinate_range_nothing_runs(mode: str) -> None:
    """No range in /etc/subuid: the sandbox user would be the worker's own uid,
    so repository code is refused, with one line that says why."""
    with throwaway_user(subordinate_ids=False) as uid:
        worker = make_worker(uid)
        try:
            marker = worker.workspace / "ran"
            commands = {"run": {"shell": f"touch {marker}"}}
            got = await as_worker(worker, mode, commands, may_refuse=True)
            assert not marker.exists()
        finally:
            shutil.rmtree(worker.home, ignore_errors=True)
    reason = got["unavailable"]
    assert "has no range in /etc/subuid and /etc/subgid" in reason, reason
    assert "\n" not in reason


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


async def test_no_nested_user_namespace_even_without_the_filter(worker: Worker, mode: str) -> None:
    """The guard alone (``user.max_user_namespaces`` = 0 in the worker's user
    namespace): the seccomp filter is swapped for allow-all."""
    commands = {"unshare": {"shell": "unshare -U true; echo rc=$?"}}
    got = await as_worker(worker, mode, commands, without_seccomp=True)
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


async def test_a_directory_closed_to_the_worker_is_still_measured(
    worker: Worker, mode: str
) -> None:
    """Unprivileged, the sandbox user is not the worker, so ``chmod 300``
    leaves a directory writable by the command but closed to the worker. The
    watcher walks inside the command's user namespace, as its root, so what
    the command hides there still counts."""
    fill = 'i=0; while :; do head -c 1048576 /dev/zero > "$HOME/hidden/f$i"; i=$((i+1)); done'
    hide = f'mkdir "$HOME/hidden" && chmod 300 "$HOME/hidden" && {fill}'
    out = await as_worker(worker, mode, {"hide": {"shell": hide}}, quota_mib=16)
    assert out["hide"]["quota_exceeded"] == "the workspace exceeded its 16 MiB disk quota", out


async def test_a_private_directory_within_the_quota_is_left_alone(
    worker: Worker, mode: str
) -> None:
    """``mktemp -d`` and pytest's ``tmp_path`` make ``0700`` directories: a
    command that keeps one for many walks of the watcher is not stopped."""
    private = (
        'd=$(mktemp -d) && echo x > "$d/f" && mkdir -m 0000 "$d/locked" '
        "&& mkdir -m 0700 here && echo y > here/f && sleep 1 && echo ok"
    )
    out = await as_worker(worker, mode, {"private": {"shell": private}}, quota_mib=16)
    assert out["private"]["quota_exceeded"] is None, out
    assert out["private"]["output"].strip() == "ok", out

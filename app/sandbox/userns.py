"""A sandbox user that is not the worker, for a worker that is not root.

An unprivileged process can map only its own uid into a user namespace, so
without help the sandboxed command would be the worker's uid to the kernel
outside, and every file of the worker's (a 0600 key included) would be kept
from it only by not being mounted. With the setuid helpers ``newuidmap`` and
``newgidmap`` (Debian's ``uidmap`` package) and a range for the worker's
user in ``/etc/subuid`` and ``/etc/subgid``, the namespace maps two ids, as
rootless podman does::

    inside 0      -> the worker's uid    (builds the mounts, hands files over)
    inside 65534  -> the worker's first subordinate uid (runs the command)

The command runs as the second, which outside is neither the worker nor any
other user: a file's mode protects it again. Before the command the writable
paths are handed to that user, after it they are handed back
(:mod:`app.sandbox.userns_helper`), so the worker reads and removes whatever
the command wrote.

Without the helpers or a range no sandbox is built (fail closed): see
docs/security.md.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import select
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.sandbox.policy import NOBODY, SandboxUnavailable

HELPER = Path(__file__).with_name("userns_helper.py")
SUBUID, SUBGID = Path("/etc/subuid"), Path("/etc/subgid")
#: Long enough for a slow machine, short enough that a stuck helper is noticed.
_TIMEOUT = 30
#: Handing a large tree back walks all of it.
_HAND_BACK_TIMEOUT = 300


@dataclass(frozen=True)
class Subordinate:
    """The worker's first subordinate uid and gid: the sandbox user outside."""

    uid: int
    gid: int


#: Writes a fresh namespace's id maps: ``(the helper's pid, the worker's ids)``.
Mapper = Callable[[int, Subordinate], None]


def _first_id(table: Path, user: str, own_id: int) -> int | None:
    """The start of the first range ``table`` grants ``user`` (by name or number)."""
    try:
        lines = table.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.strip().split(":")
        if len(fields) != 3 or fields[0] not in (user, str(own_id)):
            continue
        with contextlib.suppress(ValueError):
            if int(fields[2]) >= 1:
                return int(fields[1])
    return None


def subordinate() -> Subordinate | str:
    """The worker's subordinate ids, or one line saying what is missing."""
    for helper in ("newuidmap", "newgidmap"):
        if shutil.which(helper) is None:
            return (
                f"`{helper}` is missing (install the uidmap package): the sandbox user "
                "would be the worker's own uid"
            )
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    sub_uid, sub_gid = _first_id(SUBUID, user, uid), _first_id(SUBGID, user, uid)
    if sub_uid is None or sub_gid is None:
        return (
            f"the worker's user {user!r} has no range in {SUBUID} and {SUBGID} "
            f"(e.g. `usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}`): "
            "the sandbox user would be the worker's own uid"
        )
    return Subordinate(sub_uid, sub_gid)


class UserNamespace:
    """One command's user namespace (see the module docstring), and the
    helper process that made it: kept for the command's life, it answers the
    disk quota's walks (:meth:`measure`) and hands the paths back after the
    command (:meth:`hand_back`), so a command costs one interpreter in the
    namespace, not three.

    ``fd`` names the namespace for bubblewrap (``--userns``) and ``nsenter``;
    the caller must call :meth:`release` after the command.
    """

    def __init__(self, fd: int, writable: Sequence[Path], helper: subprocess.Popen[bytes]) -> None:
        self.fd = fd
        self.writable = [str(p) for p in writable]
        self._helper = helper
        # The quota's walks come from the watch's thread, the hand-back from
        # another: one request and its answer at a time.
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls, ids: Subordinate, writable: Sequence[Path], *, mapper: Mapper | None = None
    ) -> UserNamespace:
        """Map a fresh namespace and hand ``writable`` to the sandbox user;
        raises SandboxUnavailable (nothing handed over) when that fails.
        ``mapper`` writes the namespace's id maps (default: ``newuidmap`` and
        ``newgidmap``)."""
        argv = [sys.executable, "-I", "-S", str(HELPER), "create", str(NOBODY), str(NOBODY)]
        helper = subprocess.Popen(
            [*argv, *(str(p) for p in writable)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        assert helper.stdin is not None and helper.stdout is not None
        try:
            if helper.stdout.readline().strip() != b"unshared":
                raise SandboxUnavailable(_why(helper, "could not create a user namespace"))
            (mapper or _map)(helper.pid, ids)
            helper.stdin.write(b"mapped\n")
            helper.stdin.flush()
            if helper.stdout.readline().strip() != b"ready":
                raise SandboxUnavailable(_why(helper, "could not prepare the user namespace"))
            fd = os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            _end(helper)
            raise
        return cls(fd, writable, helper)

    def measure(self, paths: Sequence[Path], max_bytes: int, max_entries: int) -> list[Any]:
        """The disk quota's walk of ``paths`` inside the namespace: ``[bytes,
        entries, unmeasurable]``; OSError or ValueError when the helper does
        not answer so. Blocking."""
        request = {"do": "measure", "paths": [str(p) for p in paths]}
        answer = self._ask({**request, "bytes": max_bytes, "entries": max_entries}, None)
        if not isinstance(answer, list) or len(answer) != 3:
            raise ValueError(f"the namespace's helper answered {answer!r}")
        return answer

    def hand_back(self) -> str | None:
        """Give the worker everything the sandbox user owns under the writable
        paths; ``None``, or why it failed."""
        try:
            answer = self._ask({"do": "back", "paths": self.writable}, _HAND_BACK_TIMEOUT)
        except (OSError, ValueError) as exc:
            return f"handing the workspace back failed: {exc}"
        if answer != "done":
            why = answer.get("error") if isinstance(answer, dict) else answer
            return f"handing the workspace back failed: {str(why)[:300]}"
        return None

    def release(self) -> str | None:
        """Hand the writable paths back, then let the namespace and its helper go."""
        try:
            return self.hand_back()
        finally:
            _end(self._helper)
            with contextlib.suppress(OSError):
                os.close(self.fd)

    def _ask(self, request: dict[str, Any], timeout: float | None) -> Any:
        """One request to the helper and its one-line JSON answer; OSError when
        it cannot be sent, the helper ended, or ``timeout`` passed (then the
        helper is killed: a later request fails at once)."""
        helper = self._helper
        assert helper.stdin is not None and helper.stdout is not None
        with self._lock:
            helper.stdin.write(json.dumps(request).encode() + b"\n")
            helper.stdin.flush()
            # One answer per request, read whole: nothing waits in the buffer.
            ready, _, _ = select.select([helper.stdout], [], [], timeout)
            if not ready:
                helper.kill()
                raise OSError(errno.ETIMEDOUT, f"no answer in {timeout} s")
            line = helper.stdout.readline()
        if not line:
            raise OSError(errno.EPIPE, "the namespace's helper ended")
        return json.loads(line)


def reclaim(paths: Sequence[Path]) -> str | None:
    """Give the worker back what the sandbox user owns under ``paths``: a
    workspace a worker killed during a command left behind (its hand-back
    never ran). ``None``, or why not (nothing to do for a root worker)."""
    if os.geteuid() == 0:
        return None
    ids = subordinate()
    if isinstance(ids, str):
        return ids
    try:
        userns = UserNamespace.create(ids, [])  # the same mapping, nothing handed over
    except SandboxUnavailable as exc:
        return str(exc)
    userns.writable = [str(p) for p in paths]
    return userns.release()


def _map(pid: int, ids: Subordinate) -> None:
    for helper, own, sub in (
        ("newuidmap", os.getuid(), ids.uid),
        ("newgidmap", os.getgid(), ids.gid),
    ):
        argv = [helper, str(pid), "0", str(own), "1", str(NOBODY), str(sub), "1"]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"{helper} could not be run: {exc}") from None
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip()[:300]
            raise SandboxUnavailable(f"{helper} refused the worker's subordinate ids: {message}")


def _end(helper: subprocess.Popen[bytes]) -> None:
    """Close the helper's input (it exits when its input closes) and reap it."""
    for stream in (helper.stdin, helper.stdout, helper.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        helper.wait(_TIMEOUT)
    except subprocess.TimeoutExpired:
        helper.kill()
        helper.wait()


def _why(helper: subprocess.Popen[bytes], what: str) -> str:
    with contextlib.suppress(subprocess.TimeoutExpired):
        helper.wait(_TIMEOUT)
    err = helper.stderr.read().decode(errors="replace").strip()[:300] if helper.stderr else ""
    return f"{what}: {err or f'helper exited {helper.returncode}'}"

"""The unprivileged worker's user namespace for one command, and the workspace's owner.

Run as ``python -I -S userns_helper.py <mode> <uid> <gid> <path>...`` by
:mod:`app.sandbox.userns`. Standard library only (``-I -S``: nothing of the
worker's environment is imported).

``create``
    Leave for a new user namespace, tell the worker (``unshared`` on stdout)
    and wait (one line on stdin) while it maps the namespace with
    ``newuidmap``/``newgidmap``: 0 is the worker, ``uid``/``gid`` the
    worker's first subordinate id. Then, as root of the namespace: forbid
    user namespaces below it (``user.max_user_namespaces`` = 0 here; the
    sandboxed command, without capabilities in this namespace, cannot raise
    it again), hand the paths over to ``uid``/``gid`` (the sandbox user) and
    say ``ready``. Then serve the worker, one JSON request per line on stdin
    and one JSON answer per line, until stdin closes (the worker keeps this
    process for the command's life, so one interpreter per command does all
    three jobs):

    ``{"do": "measure", "paths": [...], "bytes": n, "entries": n}``
        The disk quota's walk (:mod:`quota_walk`, beside this file), as
        root of the namespace, whose ``CAP_DAC_READ_SEARCH`` reads every
        file of a user the namespace maps: ``[bytes, entries, unmeasurable]``.
    ``{"do": "back", "paths": [...]}``
        After the command: everything under the paths the sandbox user owns
        becomes the worker's again, with owner read and write (and search
        on directories), so the worker can read and remove what the command
        wrote, whatever modes it chose: ``"done"``, or ``{"error": why}``.

Never follows a symbolic link. A file owned by anyone else (a user not
mapped here) is left alone: root of this namespace has no power over it.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
import sys
from collections.abc import Callable

CLONE_NEWUSER = 0x10000000


def _walk(root: str) -> list[str]:
    """``root`` and everything below it, parents first; iterative, so a tree the
    command made thousands of levels deep cannot exhaust the recursion limit."""
    out, stack = [], [root]
    while stack:
        path = stack.pop()
        out.append(path)
        if os.path.islink(path):
            continue
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    below = stack if entry.is_dir(follow_symlinks=False) else out
                    below.append(entry.path)
        except OSError:  # not a directory, gone, or a user's this namespace does not map
            continue
    return out


def _chown_all(paths: list[str], uid: int, gid: int, *, only_owner: int | None) -> None:
    for root in paths:
        for path in _walk(root):
            try:
                st = os.lstat(path)
                if only_owner is not None and st.st_uid != only_owner:
                    continue
                os.lchown(path, uid, gid)
                if only_owner is not None and not stat.S_ISLNK(st.st_mode):
                    wanted = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
                    os.chmod(path, stat.S_IMODE(st.st_mode) | wanted)
            except OSError as exc:
                # Gone meanwhile, or owned by a user this namespace does not map.
                if exc.errno not in (errno.ENOENT, errno.EPERM):
                    raise


def create(uid: int, gid: int, paths: list[str]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    print("unshared", flush=True)
    if sys.stdin.readline().strip() != "mapped":
        sys.exit(1)  # the worker gave up (its newuidmap failed)
    with open("/proc/sys/user/max_user_namespaces", "w") as fh:
        fh.write("0")
    _chown_all(paths, uid, gid, only_owner=None)
    print("ready", flush=True)
    serve(uid)


Walk = Callable[[list[str], int, int], "tuple[int, int, str | None]"]


def _quota_walk() -> Walk:
    """:func:`quota_walk.walk`, from the file beside this one (``-I`` keeps
    this script's directory off ``sys.path``); loaded at the first walk."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quota_walk.py")
    spec = importlib.util.spec_from_file_location("quota_walk", path)
    if spec is None or spec.loader is None:
        raise OSError(errno.ENOENT, "the quota's walk is missing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    walk: Walk = module.walk
    return walk


def serve(uid: int) -> None:
    """Answer the worker's requests (see the module docstring) until stdin closes."""
    walk: Walk | None = None
    for line in sys.stdin:
        request = json.loads(line)
        paths = [str(p) for p in request["paths"]]
        answer: object
        if request["do"] == "measure":
            walk = walk or _quota_walk()
            answer = list(walk(paths, int(request["bytes"]), int(request["entries"])))
        elif request["do"] == "back":
            try:
                _chown_all(paths, 0, 0, only_owner=uid)
                answer = "done"
            except OSError as exc:
                answer = {"error": str(exc)}
        else:
            answer = {"error": f"unknown request {request['do']!r}"}
        print(json.dumps(answer), flush=True)


def main() -> None:
    mode, uid, gid, paths = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    try:
        if mode == "create":
            create(uid, gid, paths)
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    except OSError as exc:
        print(f"repairbot sandbox user namespace: {exc}", file=sys.stderr)
        sys.exit(125)


if __name__ == "__main__":
    main()

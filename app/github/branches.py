"""Conditional branch deletion: delete our branch only while it is where we left it.

``git push --force-with-lease=<ref>:<expected> :<ref>`` deletes the ref only
if the remote still has it at ``expected``, atomically on the server side, so
a human's commit pushed on top is never thrown away. No read before it: the
push reads the remote's refs itself, and its lease refuses an absent or
moved branch before anything is sent. The server's own report that the ref
was deleted is the answer; anything else (a refusal, a lost answer) is read
back with ``ls-remote``.
"""

from __future__ import annotations

import enum
import tempfile
from dataclasses import dataclass
from pathlib import Path

from app.engine import TransientError
from app.github.gitcmd import git_env, init_bare
from app.github.publish import (
    PushVerdict,
    git_auth_config,
    push,
    qualify_branch,
    remote_ref,
)


class Deletion(enum.Enum):
    DELETED = "deleted"  # this call (or a lost answer of an earlier one) removed it
    ABSENT = "absent"  # nothing there: deleted before, by anyone
    MOVED = "moved"  # somebody else's commit is there now: left alone


@dataclass(frozen=True)
class BranchDeletion:
    status: Deletion
    #: Where the branch is now (``None`` once gone).
    remote_sha: str | None

    @property
    def deleted(self) -> bool:
        return self.status is not Deletion.MOVED


async def delete_branch_if_at(
    remote_url: str, branch: str, expected_sha: str, *, token: str | None
) -> BranchDeletion:
    """Delete ``branch`` on the remote if and only if it points at ``expected_sha``.

    Raises :class:`TransientError` when the remote could not be asked or the
    branch is still at ``expected_sha`` after the push (try again later).
    """
    ref = qualify_branch(branch)
    with tempfile.TemporaryDirectory(prefix="repairbot-delete-") as tmp:
        env = git_env(git_auth_config(remote_url, token))
        init_bare(Path(tmp))
        verdict, detail = await push(
            [
                "push",
                "--porcelain",
                f"--force-with-lease={ref}:{expected_sha}",
                remote_url,
                f":{ref}",
            ],
            ref,
            cwd=Path(tmp),
            env=env,
            token=token,
        )
    if verdict is PushVerdict.OK:
        return BranchDeletion(Deletion.DELETED, None)
    after = await remote_ref(remote_url, branch, token=token)
    if after is None:
        # Gone: deleted before (the lease refused an absent branch), or by
        # this push whose answer was lost.
        status = Deletion.ABSENT if verdict is PushVerdict.LEASE else Deletion.DELETED
        return BranchDeletion(status, None)
    if after != expected_sha:
        return BranchDeletion(Deletion.MOVED, after)
    raise TransientError(f"deleting {ref} did not go through: {detail[-300:]}")

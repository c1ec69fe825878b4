"""Conditional branch deletion: delete our branch only while it is where we left it.

``git push --force-with-lease=<ref>:<expected> :<ref>`` deletes the ref only
if the remote still has it at ``expected``, atomically on the server side, so
a human's commit pushed on top is never thrown away. The outcome is read
back with ``ls-remote`` whatever git said: that also settles a lost answer.
"""

from __future__ import annotations

import enum
import tempfile
from dataclasses import dataclass
from pathlib import Path

from app.engine import TransientError
from app.github.gitcmd import git_env, init_bare, run_git
from app.github.publish import git_auth_config, qualify_branch, remote_ref


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
    before = await remote_ref(remote_url, branch, token=token)
    if before is None:
        return BranchDeletion(Deletion.ABSENT, None)
    if before != expected_sha:
        return BranchDeletion(Deletion.MOVED, before)
    secrets = [token] if token else []
    with tempfile.TemporaryDirectory(prefix="repairbot-delete-") as tmp:
        env = git_env(git_auth_config(remote_url, token))
        init_bare(Path(tmp))
        result = await run_git(
            [
                "push",
                "--porcelain",
                f"--force-with-lease={ref}:{expected_sha}",
                remote_url,
                f":{ref}",
            ],
            cwd=Path(tmp),
            env=env,
            secrets=secrets,
        )
    after = await remote_ref(remote_url, branch, token=token)
    if after is None:
        return BranchDeletion(Deletion.DELETED, None)
    if after != expected_sha:
        return BranchDeletion(Deletion.MOVED, after)
    raise TransientError(f"deleting {ref} did not go through: {result.stderr.strip()[-300:]}")

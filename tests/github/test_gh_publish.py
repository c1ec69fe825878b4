from __future__ import annotations

import asyncio
import stat
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from gh_scene import LocalGit, Scene, git

from app.engine._errors import PermanentError, TransientError
from app.github import branches, gitcmd
from app.github.branches import BranchDeletion, Deletion, delete_branch_if_at
from app.github.publish import (
    BranchDiverged,
    CommitBuildError,
    Identity,
    Patch,
    PushStatus,
    Tree,
    publish_branch,
    remote_ref,
    write_commit,
)

FIX = b"""diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""
BOT = Identity("repairbot[bot]", "repairbot@example.invalid")
WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
BRANCH = "repairbot/issue-1"
REF = f"refs/heads/{BRANCH}"


async def fix_commit(
    repo: Path, base: str, *, message: str = "Fix add", when: datetime = WHEN
) -> str:
    return (await write_commit(repo, base, Patch(FIX), message, BOT, when)).sha


# -- building -------------------------------------------------------------------------------


async def test_same_inputs_same_sha_in_any_copy(local_git: LocalGit, tmp_path: Path) -> None:
    sha = await fix_commit(local_git.work, local_git.base)
    clone = tmp_path / "clone.git"
    git("clone", "--quiet", "--bare", str(local_git.remote), str(clone), cwd=tmp_path)
    assert await fix_commit(clone, local_git.base) == sha
    assert await fix_commit(local_git.work, local_git.base, message="Fix add\n\n") == sha


async def test_commit_content_parent_and_identity(local_git: LocalGit) -> None:
    sha = await fix_commit(local_git.work, local_git.base)
    assert git("rev-parse", f"{sha}^", cwd=local_git.work) == local_git.base
    assert "return a + b" in git("show", f"{sha}:calc.py", cwd=local_git.work)
    author = git("log", "-1", "--format=%an <%ae> %at|%cn <%ce> %ct", sha, cwd=local_git.work)
    stamp = int(WHEN.timestamp())
    assert author == f"{BOT.name} <{BOT.email}> {stamp}|{BOT.name} <{BOT.email}> {stamp}"
    # The workspace's own index and files are untouched.
    assert git("status", "--porcelain", cwd=local_git.work) == ""
    assert "a - b" in (local_git.work / "calc.py").read_text()


async def test_the_commit_built_comes_with_its_tree(local_git: LocalGit) -> None:
    """What the confirmation compares the merge commit's tree with."""
    built = await write_commit(local_git.work, local_git.base, Patch(FIX), "Fix add", BOT, WHEN)
    assert built.sha == await fix_commit(local_git.work, local_git.base)
    assert built.tree == git("rev-parse", f"{built.sha}^{{tree}}", cwd=local_git.work)
    again = await write_commit(
        local_git.work, local_git.base, Tree(built.tree), "Fix add", BOT, WHEN
    )
    assert again == built


async def test_any_input_change_changes_the_sha(local_git: LocalGit) -> None:
    sha = await fix_commit(local_git.work, local_git.base)
    later = await fix_commit(local_git.work, local_git.base, when=WHEN + timedelta(seconds=1))
    reworded = await fix_commit(local_git.work, local_git.base, message="Fix add()")
    elsewhere = await fix_commit(
        local_git.work, local_git.base, when=WHEN.astimezone(timezone(timedelta(hours=2)))
    )
    assert len({sha, later, reworded, elsewhere}) == 4


async def test_tree_change_uses_the_tree_as_is(local_git: LocalGit) -> None:
    fixed = await fix_commit(local_git.work, local_git.base)
    tree = git("rev-parse", f"{fixed}^{{tree}}", cwd=local_git.work)
    built = await write_commit(local_git.work, local_git.base, Tree(tree), "Fix add", BOT, WHEN)
    assert built.sha == fixed and built.tree == tree


async def test_build_errors_are_permanent_and_say_why(local_git: LocalGit) -> None:
    with pytest.raises(CommitBuildError, match="applying the patch"):
        await write_commit(
            local_git.work, local_git.base, Patch(FIX.replace(b"a - b", b"zzz")), "m", BOT, WHEN
        )
    with pytest.raises(CommitBuildError, match="base commit"):
        await write_commit(local_git.work, "0" * 40, Patch(FIX), "m", BOT, WHEN)
    with pytest.raises(ValueError, match="timezone"):
        await write_commit(
            local_git.work, local_git.base, Patch(FIX), "m", BOT, datetime(2024, 1, 1)
        )


# -- publishing to a local bare repository ---------------------------------------------------


async def test_create_then_repeat_is_already_there(local_git: LocalGit) -> None:
    sha = await fix_commit(local_git.work, local_git.base)
    url = str(local_git.remote)
    first = await publish_branch(local_git.work, url, BRANCH, sha, expected=None)
    again = await publish_branch(local_git.work, url, BRANCH, sha, expected=None)
    assert (first.status, again.status) == (PushStatus.PUSHED, PushStatus.ALREADY_THERE)
    assert git("rev-parse", REF, cwd=local_git.remote) == sha


async def test_lease_refused_when_the_branch_is_elsewhere(local_git: LocalGit) -> None:
    sha = await fix_commit(local_git.work, local_git.base)
    git("update-ref", REF, local_git.base, cwd=local_git.remote)
    outcome = await publish_branch(
        local_git.work, str(local_git.remote), BRANCH, sha, expected=None
    )
    assert outcome.status is PushStatus.LEASE_REFUSED
    assert outcome.remote_sha == local_git.base
    assert git("rev-parse", REF, cwd=local_git.remote) == local_git.base


async def test_update_from_the_expected_commit_even_if_not_fast_forward(
    local_git: LocalGit,
) -> None:
    first = await fix_commit(local_git.work, local_git.base)
    second = await fix_commit(local_git.work, local_git.base, message="Fix add, take two")
    url = str(local_git.remote)
    await publish_branch(local_git.work, url, BRANCH, first, expected="")
    outcome = await publish_branch(local_git.work, url, BRANCH, second, expected=first)
    assert outcome.status is PushStatus.PUSHED
    assert await remote_ref(url, BRANCH) == second


async def test_racing_twins_publish_once(local_git: LocalGit) -> None:
    sha = await fix_commit(local_git.work, local_git.base)
    url = str(local_git.remote)
    outcomes = await asyncio.gather(
        *(publish_branch(local_git.work, url, BRANCH, sha, expected=None) for _ in range(2))
    )
    assert sorted(o.status for o in outcomes) == [PushStatus.ALREADY_THERE, PushStatus.PUSHED]
    assert git("rev-parse", REF, cwd=local_git.remote) == sha


async def test_racing_different_commits_one_wins(local_git: LocalGit) -> None:
    ours = await fix_commit(local_git.work, local_git.base)
    theirs = await fix_commit(local_git.work, local_git.base, message="another")
    url = str(local_git.remote)
    outcomes = await asyncio.gather(
        publish_branch(local_git.work, url, BRANCH, ours, expected=None),
        publish_branch(local_git.work, url, BRANCH, theirs, expected=None),
    )
    statuses = sorted(o.status for o in outcomes)
    assert statuses == [PushStatus.LEASE_REFUSED, PushStatus.PUSHED]
    winner = next(o.sha for o in outcomes if o.status is PushStatus.PUSHED)
    assert git("rev-parse", REF, cwd=local_git.remote) == winner


def install_hook(remote: Path, script: str) -> None:
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\n" + script)
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)


async def test_unclear_push_then_branch_elsewhere_escalates(local_git: LocalGit) -> None:
    # The hook moves the branch to the base commit, then kills receive-pack mid-push:
    # the client gets no status and finds the branch neither absent nor ours.
    install_hook(
        local_git.remote,
        "env -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES "
        f"git update-ref {REF} {local_git.base}\nkill -9 $PPID\n",
    )
    sha = await fix_commit(local_git.work, local_git.base)
    with pytest.raises(BranchDiverged) as caught:
        await publish_branch(local_git.work, str(local_git.remote), BRANCH, sha, expected=None)
    assert caught.value.actual == local_git.base and caught.value.intended == sha


async def test_unclear_push_with_nothing_changed_is_retried(local_git: LocalGit) -> None:
    # Fails only the first time (the marker file), leaving the remote untouched.
    flag = local_git.remote / "failed-once"
    install_hook(local_git.remote, f"[ -e {flag} ] && exit 0\ntouch {flag}\nkill -9 $PPID\n")
    sha = await fix_commit(local_git.work, local_git.base)
    outcome = await publish_branch(
        local_git.work, str(local_git.remote), BRANCH, sha, expected=None
    )
    assert (outcome.status, outcome.attempts) == (PushStatus.PUSHED, 2)


async def test_remote_rejection_is_permanent(local_git: LocalGit) -> None:
    install_hook(local_git.remote, "echo 'protected branch' >&2\nexit 1\n")
    sha = await fix_commit(local_git.work, local_git.base)
    with pytest.raises(PermanentError, match="refused"):
        await publish_branch(local_git.work, str(local_git.remote), BRANCH, sha, expected=None)


# -- publishing to the emulator over HTTP -----------------------------------------------------


async def emulator_workspace(scene: Scene, served: str, tmp_path: Path) -> tuple[Path, str]:
    url = f"{served}/{scene.repo.full_name}.git"
    work = tmp_path / "ws.git"
    git("clone", "--quiet", "--bare", url, str(work), cwd=tmp_path)
    return work, url


def emulator_ref(scene: Scene) -> str | None:
    from emulator.gitview import open_git

    return open_git(scene.state()).resolve(REF)


async def test_push_to_the_emulator_with_an_installation_token(
    scene: Scene, served: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, url = await emulator_workspace(scene, served, tmp_path)
    sha = await fix_commit(work, scene.head)
    token = (await scene.factory.installation_token(scene.installation_id)).token
    seen: list[tuple[tuple[str, ...], dict[str, str]]] = []
    real_run = gitcmd.run_git

    async def spy(args: list[str], **kw: object) -> gitcmd.GitResult:
        seen.append((tuple(args), dict(kw["env"])))  # type: ignore[arg-type]
        return await real_run(args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr("app.github.publish.run_git", spy)
    outcome = await publish_branch(work, url, BRANCH, sha, expected=None, token=token)
    assert outcome.status is PushStatus.PUSHED
    assert emulator_ref(scene) == sha
    network = [(argv, env) for argv, env in seen if argv[0] in ("push", "ls-remote")]
    assert network
    for argv, env in network:
        assert not any(token in arg for arg in argv)  # not in argv, not in the URL
        assert env["GIT_TERMINAL_PROMPT"] == "0"
        header = [v for k, v in env.items() if k.startswith("GIT_CONFIG_VALUE_") and "Basic" in v]
        assert header and token not in header[0]  # base64, and only in the environment


async def test_push_without_a_token_is_refused(scene: Scene, served: str, tmp_path: Path) -> None:
    work, url = await emulator_workspace(scene, served, tmp_path)
    sha = await fix_commit(work, scene.head)
    # Refused before anything moved, so provably not done: retry later (a fresh token).
    with pytest.raises(TransientError, match="still at no branch"):
        await publish_branch(work, url, BRANCH, sha, expected=None, max_pushes=1)
    assert emulator_ref(scene) is None


async def test_dropped_push_is_found_already_there(
    scene: Scene, served: str, tmp_path: Path
) -> None:
    work, url = await emulator_workspace(scene, served, tmp_path)
    sha = await fix_commit(work, scene.head)
    token = (await scene.factory.installation_token(scene.installation_id)).token
    await scene.client.faults.add("git push", "drop")
    outcome = await publish_branch(work, url, BRANCH, sha, expected=None, token=token)
    assert (outcome.status, outcome.attempts) == (PushStatus.ALREADY_THERE, 1)
    assert emulator_ref(scene) == sha
    assert all(f["fired"] == 1 for f in await scene.client.faults.list())


async def test_failed_push_is_sent_again(scene: Scene, served: str, tmp_path: Path) -> None:
    work, url = await emulator_workspace(scene, served, tmp_path)
    sha = await fix_commit(work, scene.head)
    token = (await scene.factory.installation_token(scene.installation_id)).token
    await scene.client.faults.add("git push", "fail", status=502)
    outcome = await publish_branch(work, url, BRANCH, sha, expected=None, token=token)
    assert (outcome.status, outcome.attempts) == (PushStatus.PUSHED, 2)
    assert emulator_ref(scene) == sha


async def test_racing_pushes_to_the_emulator(scene: Scene, served: str, tmp_path: Path) -> None:
    work, url = await emulator_workspace(scene, served, tmp_path)
    sha = await fix_commit(work, scene.head)
    token = (await scene.factory.installation_token(scene.installation_id)).token
    outcomes = await asyncio.gather(
        *(publish_branch(work, url, BRANCH, sha, expected=None, token=token) for _ in range(2))
    )
    assert sorted(o.status for o in outcomes) == [PushStatus.ALREADY_THERE, PushStatus.PUSHED]
    assert emulator_ref(scene) == sha


async def test_workspace_config_cannot_redirect_the_push(
    local_git: LocalGit, tmp_path: Path
) -> None:
    # Code that ran in the workspace tried to send our push (and token) elsewhere.
    decoy = tmp_path / "decoy.git"
    git("init", "--quiet", "--bare", str(decoy), cwd=tmp_path)
    git("config", f"url.{decoy}.insteadOf", str(local_git.remote), cwd=local_git.work)
    hooks = local_git.work / ".git" / "hooks"
    (hooks / "pre-push").write_text("#!/bin/sh\ntouch hooked\n")
    (hooks / "pre-push").chmod(0o755)
    sha = await fix_commit(local_git.work, local_git.base)
    outcome = await publish_branch(
        local_git.work, str(local_git.remote), BRANCH, sha, expected=None
    )
    assert outcome.status is PushStatus.PUSHED
    assert git("rev-parse", REF, cwd=local_git.remote) == sha
    assert git("for-each-ref", cwd=decoy) == ""
    assert not (local_git.work / "hooked").exists()


async def test_workspace_config_cannot_change_the_commit(local_git: LocalGit) -> None:
    expected = await fix_commit(local_git.work, local_git.base)
    for key, value in [
        ("commit.gpgSign", "true"),
        ("i18n.commitEncoding", "ISO-8859-1"),
        ("core.fsmonitor", "touch fsmonitor-ran; false"),
    ]:
        git("config", key, value, cwd=local_git.work)
    assert await fix_commit(local_git.work, local_git.base) == expected
    assert not (local_git.work / "fsmonitor-ran").exists()


async def test_branch_deleted_only_while_at_the_expected_commit(
    scene: Scene,
    served: str,
    tmp_path: Path,
    push_branch: Callable[..., Awaitable[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"{served}/{scene.repo.full_name}.git"
    token = (await scene.factory.installation_token(scene.installation_id)).token
    ours = await push_branch(BRANCH, {"calc.py": "def add(a, b):\n    return a + b\n"})
    human = await push_branch(BRANCH, {"NOTE.md": "a human's commit\n"})
    moved = await delete_branch_if_at(url, BRANCH, ours, token=token)
    assert moved == BranchDeletion(Deletion.MOVED, human)
    assert emulator_ref(scene) == human  # the human's commit is kept
    reads: list[str] = []

    async def read_back(*args: Any, **kwargs: Any) -> str | None:
        reads.append(args[1])
        return await remote_ref(*args, **kwargs)

    monkeypatch.setattr(branches, "remote_ref", read_back)
    done = await delete_branch_if_at(url, BRANCH, human, token=token)
    assert done == BranchDeletion(Deletion.DELETED, None) and done.deleted
    assert emulator_ref(scene) is None
    # The server reported the deletion: no ls-remote before or after it.
    assert reads == []
    again = await delete_branch_if_at(url, BRANCH, human, token=token)
    assert again.status is Deletion.ABSENT and again.deleted

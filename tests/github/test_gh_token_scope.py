"""Installation tokens narrowed to one repository and a step's permissions, as GitHub does.

The emulator honours ``repositories`` and ``permissions`` of
``POST /app/installations/{id}/access_tokens``: another repository of the
same installation answers 404 (REST and git), a write the token lacks 403.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from gh_scene import Scene, git

from app.engine._errors import TransientError
from app.github.gitcmd import fetch_commit
from app.github.publish import Identity, Patch, PushStatus, publish_branch, write_commit

FIX = b"""diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""


async def test_tokens_are_cached_per_scope(scene: Scene) -> None:
    tokens = scene.factory.tokens
    read = await scene.factory.installation_token(
        scene.installation_id, repository="octo/demo", permissions={"contents": "read"}
    )
    again = await scene.factory.installation_token(
        scene.installation_id, repository="octo/demo", permissions={"contents": "read"}
    )
    write = await scene.factory.installation_token(
        scene.installation_id, repository="octo/demo", permissions={"contents": "write"}
    )
    wide = await scene.factory.installation_token(scene.installation_id)
    assert again is read and len({read.token, write.token, wide.token}) == 3
    assert tokens.mints == 3


async def test_a_scoped_token_sees_one_repository_and_may_only_what_it_was_given(
    scene: Scene, served: str, seed_folder: Path, tmp_path: Path
) -> None:
    await scene.client.create_repo_from_folder("octo", "other", seed_folder)
    read = (
        await scene.factory.installation_token(
            scene.installation_id, repository="octo/demo", permissions={"contents": "read"}
        )
    ).token
    transport = httpx.ASGITransport(app=scene.emulator.asgi())
    async with httpx.AsyncClient(transport=transport, base_url=scene.client.api_url) as api:
        headers = {"Authorization": f"token {read}"}
        assert (await api.get("/repos/octo/demo", headers=headers)).status_code == 200
        assert (await api.get("/repos/octo/other", headers=headers)).status_code == 404
        issue = {"title": "a write the token was not given"}
        created = await api.post("/repos/octo/demo/issues", headers=headers, json=issue)
        assert created.status_code == 403

    # git: the same token reads its repository, and nothing else.
    for name, expected in (("demo", "fetched"), ("other", "unreachable")):
        bare = tmp_path / f"{name}.git"
        git("init", "--quiet", "--bare", str(bare), cwd=tmp_path)
        sha = git("ls-remote", f"{served}/octo/demo.git", "HEAD", cwd=tmp_path).split()[0]
        outcome = await fetch_commit(bare, f"{served}/octo/{name}.git", sha, token=read)
        assert outcome.status == expected, outcome.detail
        assert read not in outcome.detail

    # Pushing needs contents: write; the read token is refused, a write token is not.
    work = tmp_path / "demo.git"
    commit = (
        await write_commit(
            work,
            scene.head,
            Patch(FIX),
            "Fix add",
            Identity("repairbot[bot]", "bot@example.invalid"),
            datetime(2024, 5, 1, tzinfo=UTC),
        )
    ).sha
    url = f"{served}/octo/demo.git"
    with pytest.raises(TransientError):
        await publish_branch(
            work, url, "repairbot/x", commit, expected=None, token=read, max_pushes=1
        )
    write = (
        await scene.factory.installation_token(
            scene.installation_id, repository="octo/demo", permissions={"contents": "write"}
        )
    ).token
    pushed = await publish_branch(work, url, "repairbot/x", commit, expected=None, token=write)
    assert pushed.status is PushStatus.PUSHED


async def test_a_runs_rest_client_reaches_its_repository_only(
    scene: Scene, seed_folder: Path
) -> None:
    """Activities build REST clients for the run's repository: its tokens are
    minted for that one repository, so a call cannot reach another one."""
    from githubkit.exception import RequestFailed

    await scene.client.create_repo_from_folder("octo", "other", seed_folder)
    gh = scene.factory.for_installation(scene.installation_id, repository="octo/demo")
    assert gh is scene.factory.for_installation(scene.installation_id, repository="octo/demo")
    assert (await gh.rest.repos.async_get("octo", "demo")).parsed_data.name == "demo"
    with pytest.raises(RequestFailed) as refused:
        await gh.rest.repos.async_get("octo", "other")
    assert refused.value.response.status_code == 404
    wide = scene.factory.for_installation(scene.installation_id)
    assert (await wide.rest.repos.async_get("octo", "other")).parsed_data.name == "other"

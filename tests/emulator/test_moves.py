"""Renames, transfers, issue deletion and transfer, installation suspension:
the webhooks GitHub sends for each and the redirects old names answer with."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from emu_helpers import SECRET, WebhookSink, World
from git_helpers import GitClient, serve_asgi
from githubkit import AppInstallationAuthStrategy, GitHub
from githubkit.cache import MemCacheStrategy
from githubkit.exception import RequestFailed

from emulator.app import Emulator
from emulator.client import EmulatorClient


async def test_rename_keeps_the_id_sends_renamed_and_redirects(
    world: World, sink: WebhookSink
) -> None:
    old_id = world.client.repo_id("octo/demo")
    await world.client.rename_repo("octo", "demo", "gadget", as_user="octo")
    await world.client.deliveries.wait()
    [renamed] = sink.events("repository", "renamed")
    assert renamed["repository"]["id"] == old_id
    assert renamed["repository"]["full_name"] == "octo/gadget"
    assert renamed["changes"] == {"repository": {"name": {"from": "demo"}}}
    assert renamed["installation"]["id"] == world.installation_id
    gh = world.github()
    # githubkit follows GitHub's redirect from the old name.
    via_old = (await gh.rest.repos.async_get("octo", "demo")).parsed_data
    assert (via_old.id, via_old.full_name) == (old_id, "octo/gadget")
    raw = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=world.emulator.asgi()), base_url="http://emu"
    )
    token = world.client.tokens["octo"]
    headers = {"Authorization": f"token {token}"}
    async with raw:
        read = await raw.get(
            f"{world.client.base_path}/repos/octo/demo/issues?x=1", headers=headers
        )
        write = await raw.post(
            f"{world.client.base_path}/repos/octo/demo/issues", headers=headers, json={"title": "t"}
        )
    assert read.status_code == 301
    assert read.headers["location"].endswith("/repos/octo/gadget/issues?x=1")
    assert write.status_code == 307  # the method and body are kept
    assert write.headers["location"].endswith("/repos/octo/gadget/issues")


async def test_only_an_admin_renames(world: World) -> None:
    alice = world.user_github("alice")
    with pytest.raises(RequestFailed) as err:
        await alice.rest.repos.async_update("octo", "demo", name="x")
    assert err.value.response.status_code == 403


async def test_transfer_sends_transferred_from_the_old_owner(
    world: World, sink: WebhookSink
) -> None:
    await world.client.create_user("acme", type="Organization")
    await world.client.rest(
        "POST", "/repos/octo/demo/transfer", as_user="octo", body={"new_owner": "acme"}
    )
    installed = await world.client.create_installation(world.app.id, "acme")
    repo = world.emulator.store.repo("acme", "demo")
    assert repo is not None and repo.id == world.client.repo_id("octo/demo")
    await world.client.rename_repo("acme", "demo", "demo2", as_user="acme")
    await world.client.deliveries.wait()
    [renamed] = sink.events("repository", "renamed")
    assert renamed["installation"]["id"] == installed
    gh = world.github(installation_id=installed)
    got = (await gh.rest.repos.async_get("octo", "demo")).parsed_data
    assert got.full_name == "acme/demo2"


async def test_transfer_event_names_the_former_owner(world: World, sink: WebhookSink) -> None:
    await world.client.create_user("bob")
    await world.client.create_installation(world.app.id, "bob")
    await world.client.rest(
        "POST", "/repos/octo/demo/transfer", as_user="octo", body={"new_owner": "bob"}
    )
    await world.client.deliveries.wait()
    [moved] = sink.events("repository", "transferred")
    assert moved["repository"]["full_name"] == "bob/demo"
    assert moved["changes"]["owner"]["from"]["user"]["login"] == "octo"


async def test_git_over_the_old_name_follows_the_redirect(
    tmp_path: Path, seed_folder: Path, sink: WebhookSink
) -> None:
    emu = Emulator(root=tmp_path / "emu", base_path="/api/v3", sender=sink)
    with emu, serve_asgi(emu.asgi()) as url:
        async with EmulatorClient(url, base_path="/api/v3") as c:
            await c.create_user("octo")
            await c.create_repo_from_folder("octo", "demo", seed_folder)
            app = await c.create_app(webhook_url="http://app.test/", webhook_secret=SECRET)
            inst = await c.create_installation(app.id, "octo")
            assert app.private_key_pem is not None
            gh = GitHub(
                AppInstallationAuthStrategy(str(app.id), app.private_key_pem, inst),
                base_url=c.api_url,
                cache_strategy=MemCacheStrategy(),
            )
            token = (
                await gh.rest.apps.async_create_installation_access_token(inst)
            ).parsed_data.token
            await c.rename_repo("octo", "demo", "renamed", as_user="octo")
            git = GitClient(home=tmp_path).with_token(token)
            work = tmp_path / "work"
            git.run("clone", "--quiet", f"{url}/octo/demo.git", str(work))
            assert (work / "calc.py").exists()
            assert "refs/heads/main" in git.ls_remote(f"{url}/octo/demo.git")


async def test_deleting_an_issue_sends_deleted(world: World, sink: WebhookSink) -> None:
    made = await world.client.create_issue("octo", "demo", as_user="rita", title="t")
    await world.client.delete_issue("octo", "demo", made["number"], as_user="octo")
    await world.client.deliveries.wait()
    [deleted] = sink.events("issues", "deleted")
    assert deleted["issue"]["number"] == made["number"]
    gh = world.github()
    with pytest.raises(RequestFailed) as err:
        await gh.rest.issues.async_get("octo", "demo", made["number"])
    assert err.value.response.status_code == 404


async def test_transferring_an_issue_sends_transferred_with_its_new_place(
    world: World, sink: WebhookSink
) -> None:
    await world.client.create_repo_from_folder("octo", "other", None)
    await world.client.set_permission("octo", "other", "alice", "write")
    made = await world.client.create_issue("octo", "demo", as_user="rita", title="moving")
    await world.client.comment("octo", "demo", made["number"], "hello", as_user="alice")
    moved = await world.client.transfer_issue(
        "octo", "demo", made["number"], "octo/other", as_user="alice"
    )
    await world.client.deliveries.wait()
    [event] = sink.events("issues", "transferred")
    assert event["repository"]["full_name"] == "octo/demo"
    assert event["issue"]["number"] == made["number"]
    assert event["changes"]["new_repository"]["full_name"] == "octo/other"
    assert event["changes"]["new_issue"]["number"] == moved["number"]
    gh = world.github()
    comments = (
        await gh.rest.issues.async_list_comments("octo", "other", moved["number"])
    ).parsed_data
    assert [c.body for c in comments] == ["hello"]
    # The old number redirects there, for reads and writes (githubkit follows).
    via_old = (await gh.rest.issues.async_get("octo", "demo", made["number"])).parsed_data
    assert via_old.number == moved["number"] and via_old.title == "moving"
    await gh.rest.issues.async_create_comment("octo", "demo", made["number"], body="still here")
    again = (await gh.rest.issues.async_list_comments("octo", "other", moved["number"])).parsed_data
    assert [c.body for c in again] == ["hello", "still here"]


async def test_a_reader_closes_their_own_issue_but_not_others(world: World) -> None:
    own = await world.client.create_issue("octo", "demo", as_user="rita", title="mine")
    other = await world.client.create_issue("octo", "demo", as_user="octo", title="theirs")
    rita = world.user_github("rita")
    closed = await rita.rest.issues.async_update("octo", "demo", own["number"], state="closed")
    assert closed.parsed_data.state == "closed"
    with pytest.raises(RequestFailed) as err:
        await rita.rest.issues.async_update("octo", "demo", other["number"], state="closed")
    assert err.value.response.status_code == 403


async def test_suspension_answers_403_and_sends_suspend_and_unsuspend(
    world: World, sink: WebhookSink
) -> None:
    gh = world.github()
    await gh.rest.repos.async_get("octo", "demo")  # a token is minted and works
    await world.client.suspend_installation(world.installation_id)
    with pytest.raises(RequestFailed) as err:
        await gh.rest.repos.async_get("octo", "demo")
    assert err.value.response.status_code == 403
    assert err.value.response.json()["message"] == "This installation has been suspended"
    await world.client.suspend_installation(world.installation_id, suspended=False)
    assert (await gh.rest.repos.async_get("octo", "demo")).parsed_data.name == "demo"
    await world.client.deliveries.wait()
    actions = [e["action"] for e in sink.events("installation") if e["action"] != "created"]
    assert actions == ["suspend", "unsuspend"]
    [suspend] = sink.events("installation", "suspend")
    assert suspend["installation"]["suspended_at"] is not None


async def test_a_suspended_installation_mints_no_token_and_says_so(world: World) -> None:
    """GitHub refuses to mint a suspended installation's token with 403 "This
    installation has been suspended", while the App's JWT still reads the
    installation, whose ``suspended_at`` tells why (what the app asks after
    git's bare 401)."""
    app_gh = world.app_github()
    await world.client.suspend_installation(world.installation_id)
    with pytest.raises(RequestFailed) as err:
        await app_gh.rest.apps.async_create_installation_access_token(world.installation_id)
    assert err.value.response.status_code == 403
    assert err.value.response.json()["message"] == "This installation has been suspended"
    seen = (await app_gh.rest.apps.async_get_installation(world.installation_id)).parsed_data
    assert seen.suspended_at is not None
    assert seen.suspended_by is not None and seen.suspended_by.login == seen.account.login
    await world.client.suspend_installation(world.installation_id, suspended=False)
    minted = await app_gh.rest.apps.async_create_installation_access_token(world.installation_id)
    assert minted.status_code == 201
    seen = (await app_gh.rest.apps.async_get_installation(world.installation_id)).parsed_data
    assert seen.suspended_at is None and seen.suspended_by is None

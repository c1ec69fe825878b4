"""Forks behave like GitHub's where repairbot's proposals depend on them:
asynchronous creation (202, then the fork appears), ``fork``/``parent``/
``source``, pushes over smart HTTP, pull requests from ``owner:branch`` on the
base repository, the ``head`` filter, merging a fork's head into the base,
and ``pull_request`` webhooks on the base repository naming the fork."""

from __future__ import annotations

from pathlib import Path

import pytest
from emu_helpers import SECRET, WebhookSink, World
from git_helpers import GitClient, serve_asgi
from githubkit import AppInstallationAuthStrategy, GitHub
from githubkit.cache import MemCacheStrategy
from githubkit.exception import RequestFailed

from emulator.app import Emulator
from emulator.client import EmulatorClient
from emulator.git import BareRepo
from emulator.state import DEFAULT_APP_PERMISSIONS

ORG = "acme-bot"
#: What an App needs on the proposal organization to create forks there.
FORKING = {**DEFAULT_APP_PERMISSIONS, "administration": "write"}


async def _org_installation(world: World, permissions: dict[str, str] = FORKING) -> int:
    await world.client.create_user(ORG, type="Organization")
    return await world.client.create_installation(world.app.id, ORG, permissions=permissions)


async def _fork(world: World, inst: int) -> tuple[int, dict[str, object]]:
    gh = world.github(installation_id=inst)
    response = await gh.rest.repos.async_create_fork("octo", "demo", organization=ORG)
    return response.status_code, response.json()


async def _fork_with_branch(world: World) -> tuple[int, str]:
    """The org's fork of ``octo/demo`` (there at once) with a commit by alice on
    ``fix``: the installation id and the commit."""
    inst = await _org_installation(world)
    await world.client.fork_pending(0)
    await _fork(world, inst)
    await world.client.set_permission(ORG, "demo", "alice", "write")
    pushed = await world.client.push_as("alice", ORG, "demo", "fix", {"calc.py": "fixed\n"})
    return inst, str(pushed["sha"])


async def _pull_from_fork(world: World) -> tuple[int, str, int]:
    """As :func:`_fork_with_branch`, plus a pull request on ``octo/demo`` from
    ``acme-bot:fix``: installation id, commit and pull request number."""
    inst, sha = await _fork_with_branch(world)
    gh = world.github()
    created = await gh.rest.pulls.async_create(
        "octo", "demo", title="t", head=f"{ORG}:fix", base="main"
    )
    return inst, sha, created.parsed_data.number


def _branches(world: World, owner: str, name: str) -> dict[str, str]:
    repo = world.emulator.store.repo(owner, name)
    assert repo is not None
    return BareRepo(repo.path).list_refs("refs/heads/")


async def test_a_fork_is_created_asynchronously_and_names_its_parent(world: World) -> None:
    inst = await _org_installation(world)
    status, body = await _fork(world, inst)
    assert status == 202
    assert body["full_name"] == f"{ORG}/demo" and body["fork"] is True
    assert body["parent"]["full_name"] == "octo/demo"  # type: ignore[index]
    assert body["source"]["full_name"] == "octo/demo"  # type: ignore[index]
    gh = world.github(installation_id=inst)
    with pytest.raises(RequestFailed) as missing:
        await gh.rest.repos.async_get(ORG, "demo")  # not there yet
    assert missing.value.response.status_code == 404
    fork = (await gh.rest.repos.async_get(ORG, "demo")).parsed_data
    assert fork.fork and fork.parent is not None and fork.source is not None
    base_gh = world.github()
    parent = (await base_gh.rest.repos.async_get("octo", "demo")).parsed_data
    assert fork.parent.id == fork.source.id == parent.id
    assert parent.forks_count == 1 and not parent.fork
    assert _branches(world, ORG, "demo") == _branches(world, "octo", "demo")


async def test_forking_again_answers_the_existing_fork(world: World) -> None:
    inst = await _org_installation(world)
    await world.client.fork_pending(0)
    _, first = await _fork(world, inst)
    gh = world.github(installation_id=inst)
    again = await gh.rest.repos.async_create_fork("octo", "demo", organization=ORG, name="other")
    assert again.status_code == 202 and again.json()["id"] == first["id"]


async def test_a_taken_name_gets_a_suffix(world: World, seed_folder: Path) -> None:
    inst = await _org_installation(world)
    await world.client.fork_pending(0)
    await world.client.create_repo_from_folder(ORG, "demo", seed_folder)
    _, body = await _fork(world, inst)
    assert body["full_name"] == f"{ORG}/demo-1" and body["fork"] is True


async def test_forking_into_an_organization_needs_administration_there(world: World) -> None:
    inst = await _org_installation(world, permissions=DEFAULT_APP_PERMISSIONS)
    with pytest.raises(RequestFailed) as refused:
        await _fork(world, inst)
    assert refused.value.response.status_code == 403
    # The base repository's own installation may not fork into another account.
    base_gh = world.github()
    with pytest.raises(RequestFailed) as elsewhere:
        await base_gh.rest.repos.async_create_fork("octo", "demo", organization=ORG)
    assert elsewhere.value.response.status_code == 403
    assert world.emulator.store.repo(ORG, "demo") is None


async def test_pull_request_from_a_fork_lives_on_the_base(world: World, sink: WebhookSink) -> None:
    _, sha = await _fork_with_branch(world)
    gh = world.github()
    created = await gh.rest.pulls.async_create(
        "octo", "demo", title="Fix", head=f"{ORG}:fix", base="main", draft=True
    )
    pr = created.parsed_data
    assert pr.head.label == f"{ORG}:fix" and pr.head.ref == "fix"
    assert pr.head.sha == sha
    assert pr.head.repo is not None and pr.head.repo.full_name == f"{ORG}/demo"
    assert pr.head.repo.fork and pr.base.repo.full_name == "octo/demo"
    # The base repository got no branch; it keeps the head as GitHub does.
    assert list(_branches(world, "octo", "demo")) == ["refs/heads/main"]
    base = world.emulator.store.repo("octo", "demo")
    assert base is not None
    assert BareRepo(base.path).ref_sha(f"refs/pull/{pr.number}/head") == sha
    listed = await gh.rest.pulls.async_list("octo", "demo", head=f"{ORG}:fix", state="all")
    assert [p.number for p in listed.parsed_data] == [pr.number]
    same_repo = await gh.rest.pulls.async_list("octo", "demo", head="octo:fix", state="all")
    assert same_repo.parsed_data == []
    with pytest.raises(RequestFailed) as twice:
        await gh.rest.pulls.async_create("octo", "demo", title="x", head=f"{ORG}:fix", base="main")
    assert "already exists" in twice.value.response.text
    await world.client.deliveries.wait()
    (opened,) = sink.events("pull_request", "opened")
    assert opened["repository"]["full_name"] == "octo/demo"
    assert opened["pull_request"]["head"]["repo"]["full_name"] == f"{ORG}/demo"
    assert opened["installation"]["id"] == world.installation_id


async def test_a_push_to_the_fork_synchronizes_the_base_pull_request(
    world: World, sink: WebhookSink
) -> None:
    inst, first, number = await _pull_from_fork(world)
    second = await world.client.push_as("alice", ORG, "demo", "fix", {"calc.py": "again\n"})
    await world.client.deliveries.wait()
    (sync,) = sink.events("pull_request", "synchronize")
    assert sync["repository"]["full_name"] == "octo/demo"
    assert (sync["before"], sync["after"]) == (first, second["sha"])
    assert sync["installation"]["id"] == world.installation_id
    # The fork's own push event goes to the installation on the fork's owner.
    fork_pushes = [p for p in sink.events("push") if p["repository"]["full_name"] == f"{ORG}/demo"]
    assert {p["installation"]["id"] for p in fork_pushes} == {inst}
    gh = world.github()
    seen = (await gh.rest.pulls.async_get("octo", "demo", number)).parsed_data
    assert seen.head.sha == second["sha"]


async def test_merging_a_fork_pull_request_brings_its_commit_into_the_base(world: World) -> None:
    _, sha, number = await _pull_from_fork(world)
    gh = world.github()
    merged = await gh.rest.pulls.async_merge("octo", "demo", number, sha=sha, merge_method="merge")
    base = world.emulator.store.repo("octo", "demo")
    assert base is not None
    git = BareRepo(base.path)
    head = git.resolve("refs/heads/main")
    assert head == merged.parsed_data.sha
    info = git.commit_info(head)
    assert info.parents[1] == sha
    assert info.message.startswith(f"Merge pull request #{number} from {ORG}/fix")
    assert git.read_file(head, "calc.py") == b"fixed\n"


async def test_a_pull_request_from_an_unknown_owner_is_refused(world: World) -> None:
    await world.client.create_user("mallory")
    gh = world.github()
    with pytest.raises(RequestFailed) as refused:
        await gh.rest.pulls.async_create("octo", "demo", title="t", head="mallory:fix", base="main")
    assert refused.value.response.status_code == 422


async def test_installation_of_an_organization_is_found_by_name(world: World) -> None:
    inst = await _org_installation(world)
    app_gh = world.app_github()
    found = await app_gh.rest.apps.async_get_org_installation(ORG)
    assert found.parsed_data.id == inst
    with pytest.raises(RequestFailed):
        await app_gh.rest.apps.async_get_user_installation(ORG)


async def test_push_to_a_fork_over_smart_http(
    tmp_path: Path, seed_folder: Path, sink: WebhookSink
) -> None:
    """Real git: the fork refuses git until it exists, then takes a push with the
    proposal organization's installation token; the base gets no branch."""
    emu = Emulator(root=tmp_path / "emu", base_path="/api/v3", sender=sink)
    with emu, serve_asgi(emu.asgi()) as url:
        async with EmulatorClient(url, base_path="/api/v3") as c:
            await c.create_user("octo")
            await c.create_user(ORG, type="Organization")
            await c.create_repo_from_folder("octo", "demo", seed_folder)
            app = await c.create_app(webhook_url="http://app.test/", webhook_secret=SECRET)
            inst = await c.create_installation(app.id, ORG, permissions=FORKING)
            assert app.private_key_pem is not None
            gh = GitHub(
                AppInstallationAuthStrategy(str(app.id), app.private_key_pem, inst),
                base_url=c.api_url,
                cache_strategy=MemCacheStrategy(),
            )
            await gh.rest.repos.async_create_fork("octo", "demo", organization=ORG)
            token = (
                await gh.rest.apps.async_create_installation_access_token(inst)
            ).parsed_data.token
            git = GitClient(home=tmp_path).with_token(token)
            fork_url = f"{url}/{ORG}/demo.git"
            assert git.run("ls-remote", fork_url, check=False).returncode != 0  # arriving
            work = tmp_path / "work"
            git.run("clone", "--quiet", fork_url, str(work))
            sha = git.commit_file(work, "calc.py", "fixed\n", "fix add")
            git.run("push", "--quiet", "origin", "HEAD:refs/heads/fix", cwd=work)
            assert git.ls_remote(fork_url)["refs/heads/fix"] == sha
            base = GitClient(home=tmp_path).ls_remote(f"{url}/octo/demo.git")
            assert "refs/heads/fix" not in base

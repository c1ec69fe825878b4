"""Every REST endpoint the app uses, called through githubkit and parsed into its
models (``.parsed_data``): a missing or mistyped field fails here."""

from __future__ import annotations

from typing import Any

import pytest
from emu_helpers import World
from githubkit.exception import RequestFailed


async def test_app_and_installation_endpoints(world: World) -> None:
    app_gh = world.app_github()
    me = (await app_gh.rest.apps.async_get_authenticated()).parsed_data
    assert me is not None and me.id == world.app.id and me.slug == "repairbot"
    inst = (await app_gh.rest.apps.async_get_repo_installation("octo", "demo")).parsed_data
    assert inst.id == world.installation_id and inst.account is not None
    listed = (await app_gh.rest.apps.async_list_installations()).parsed_data
    assert [i.id for i in listed] == [world.installation_id]
    token = (
        await app_gh.rest.apps.async_create_installation_access_token(world.installation_id)
    ).parsed_data
    assert token.token.startswith("ghs_") and token.expires_at


async def test_repository_branches_commits(world: World) -> None:
    gh = world.github()
    repo = (await gh.rest.repos.async_get("octo", "demo")).parsed_data
    assert repo.default_branch == "main" and repo.owner.login == "octo"
    branches = (await gh.rest.repos.async_list_branches("octo", "demo")).parsed_data
    assert [(b.name, b.commit.sha) for b in branches] == [("main", world.head)]
    branch = (await gh.rest.repos.async_get_branch("octo", "demo", "main")).parsed_data
    assert branch.commit.sha == world.head
    commit = (await gh.rest.repos.async_get_commit("octo", "demo", "main")).parsed_data
    assert commit.sha == world.head and commit.commit.message == "Initial commit"
    git_commit = (await gh.rest.git.async_get_commit("octo", "demo", world.head)).parsed_data
    assert git_commit.sha == world.head and git_commit.parents == []


async def test_git_refs_crud(world: World) -> None:
    gh = world.github()
    created = (
        await gh.rest.git.async_create_ref("octo", "demo", ref="refs/heads/topic", sha=world.head)
    ).parsed_data
    assert created.ref == "refs/heads/topic" and created.object_.sha == world.head
    got = (await gh.rest.git.async_get_ref("octo", "demo", "heads/topic")).parsed_data
    assert got.object_.sha == world.head
    matching = (await gh.rest.git.async_list_matching_refs("octo", "demo", "heads/")).parsed_data
    assert {r.ref for r in matching} == {"refs/heads/main", "refs/heads/topic"}
    with pytest.raises(RequestFailed) as exists:
        await gh.rest.git.async_create_ref("octo", "demo", ref="refs/heads/topic", sha=world.head)
    assert exists.value.response.status_code == 422
    pushed = await world.client.push_as("alice", "octo", "demo", "other", {"x.txt": "x"})
    updated = (
        await gh.rest.git.async_update_ref("octo", "demo", "heads/topic", sha=pushed["sha"])
    ).parsed_data
    assert updated.object_.sha == pushed["sha"]
    with pytest.raises(RequestFailed) as not_ff:
        await gh.rest.git.async_update_ref("octo", "demo", "heads/topic", sha=world.head)
    assert not_ff.value.response.status_code == 422
    forced = await gh.rest.git.async_update_ref(
        "octo", "demo", "heads/topic", sha=world.head, force=True
    )
    assert forced.parsed_data.object_.sha == world.head
    deleted = await gh.rest.git.async_delete_ref("octo", "demo", "heads/topic")
    assert deleted.status_code == 204
    with pytest.raises(RequestFailed) as gone:
        await gh.rest.git.async_get_ref("octo", "demo", "heads/topic")
    assert gone.value.response.status_code == 404


async def test_legacy_refs_listing(world: World) -> None:
    gh = world.github()
    resp = await gh.arequest("GET", "/repos/octo/demo/git/refs")
    assert [r["ref"] for r in resp.json()] == ["refs/heads/main"]


async def test_issues_labels_and_comments(world: World) -> None:
    gh = world.github()
    issue = await world.client.create_issue(
        "octo", "demo", as_user="alice", title="add() subtracts"
    )
    number = issue["number"]
    got = (await gh.rest.issues.async_get("octo", "demo", number)).parsed_data
    assert got.title == "add() subtracts" and got.user is not None and got.user.login == "alice"
    listed = (await gh.rest.issues.async_list_for_repo("octo", "demo")).parsed_data
    assert [i.number for i in listed] == [number]
    labels = (
        await gh.rest.issues.async_add_labels("octo", "demo", number, labels=["repairbot", "bug"])
    ).parsed_data
    assert [lbl.name for lbl in labels] == ["repairbot", "bug"]
    left = (await gh.rest.issues.async_remove_label("octo", "demo", number, "bug")).parsed_data
    assert [lbl.name for lbl in left] == ["repairbot"]
    updated = (
        await gh.rest.issues.async_update("octo", "demo", number, title="add() is wrong")
    ).parsed_data
    assert updated.title == "add() is wrong"
    comment = (
        await gh.rest.issues.async_create_comment("octo", "demo", number, body="on it")
    ).parsed_data
    assert comment.user is not None and comment.user.login == "repairbot[bot]"
    assert comment.performed_via_github_app is not None
    edited = (
        await gh.rest.issues.async_update_comment("octo", "demo", comment.id, body="fixed")
    ).parsed_data
    assert edited.body == "fixed"
    one = (await gh.rest.issues.async_get_comment("octo", "demo", comment.id)).parsed_data
    assert one.body == "fixed"
    comments = (await gh.rest.issues.async_list_comments("octo", "demo", number)).parsed_data
    assert [c.id for c in comments] == [comment.id]
    closed = (await gh.rest.issues.async_update("octo", "demo", number, state="closed")).parsed_data
    assert closed.state == "closed" and closed.closed_at is not None


async def _open_pr(world: World, gh: Any, branch: str = "fix", draft: bool = True) -> Any:
    await world.client.push_as(
        "alice", "octo", "demo", branch, {"calc.py": "def add(a, b):\n    return a + b\n"}
    )
    return (
        await gh.rest.pulls.async_create(
            "octo", "demo", title="Fix add", head=branch, base="main", body="fix", draft=draft
        )
    ).parsed_data


async def test_pull_requests_create_list_get_update(world: World) -> None:
    gh = world.github()
    pr = await _open_pr(world, gh)
    assert pr.draft is True and pr.head.ref == "fix" and pr.base.sha == world.head
    listed = (
        await gh.rest.pulls.async_list("octo", "demo", head="octo:fix", base="main", state="open")
    ).parsed_data
    assert [p.number for p in listed] == [pr.number]
    assert (await gh.rest.pulls.async_list("octo", "demo", head="octo:nope")).parsed_data == []
    assert (await gh.rest.pulls.async_list("octo", "demo", state="closed")).parsed_data == []
    got = (await gh.rest.pulls.async_get("octo", "demo", pr.number)).parsed_data
    assert got.mergeable is True and got.mergeable_state == "draft" and got.head.sha == pr.head.sha
    updated = (
        await gh.rest.pulls.async_update("octo", "demo", pr.number, title="Fix add()")
    ).parsed_data
    assert updated.title == "Fix add()"


async def test_reviews_and_merge(world: World) -> None:
    gh = world.github()
    pr = await _open_pr(world, gh, draft=False)
    await world.client.create_user("bob")
    await world.client.set_permission("octo", "demo", "bob", "write")
    bob = world.user_github("bob")
    review = (
        await bob.rest.pulls.async_create_review("octo", "demo", pr.number, event="APPROVE")
    ).parsed_data
    assert review.state == "APPROVED" and review.commit_id == pr.head.sha
    reviews = (await gh.rest.pulls.async_list_reviews("octo", "demo", pr.number)).parsed_data
    assert [(r.id, r.user.login if r.user else None) for r in reviews] == [(review.id, "bob")]
    one = (await gh.rest.pulls.async_get_review("octo", "demo", pr.number, review.id)).parsed_data
    assert one.commit_id == pr.head.sha
    result = (
        await gh.rest.pulls.async_merge(
            "octo", "demo", pr.number, sha=pr.head.sha, merge_method="squash"
        )
    ).parsed_data
    assert result.merged is True
    resp = await gh.rest.pulls.async_get("octo", "demo", pr.number)
    merged = resp.parsed_data
    assert merged.merged and merged.state == "closed"
    # API version 2026-03-10 (githubkit's) removed merge_commit_sha; 2022-11-28 has it.
    assert "merge_commit_sha" not in resp.json()
    old = await gh.rest.pulls.async_get(
        "octo", "demo", pr.number, headers={"X-GitHub-Api-Version": "2022-11-28"}
    )
    assert old.json()["merge_commit_sha"] == result.sha
    assert (await gh.rest.pulls.async_check_if_merged("octo", "demo", pr.number)).status_code == 204


async def test_dismiss_review(world: World) -> None:
    gh = world.github()
    pr = await _open_pr(world, gh, draft=False)
    review = await world.client.review(
        "octo", "demo", pr.number, as_user="octo", event="REQUEST_CHANGES", body="no"
    )
    dismissed = (
        await gh.rest.pulls.async_dismiss_review(
            "octo", "demo", pr.number, review["id"], message="superseded"
        )
    ).parsed_data
    assert dismissed.state == "DISMISSED"


async def test_collaborator_permission(world: World) -> None:
    gh = world.github()
    for login, expected in (("octo", "admin"), ("alice", "write"), ("rita", "read")):
        perm = (
            await gh.rest.repos.async_get_collaborator_permission_level("octo", "demo", login)
        ).parsed_data
        assert perm.permission == expected and perm.user is not None and perm.user.login == login


async def test_check_runs(world: World) -> None:
    gh = world.github()
    run = (
        await gh.rest.checks.async_create(
            "octo", "demo", name="repairbot", head_sha=world.head, status="in_progress"
        )
    ).parsed_data
    assert run.status == "in_progress" and run.app is not None
    done = (
        await gh.rest.checks.async_update(
            "octo",
            "demo",
            run.id,
            conclusion="success",
            output={"title": "Fixed", "summary": "all green"},
        )
    ).parsed_data
    assert done.status == "completed" and done.conclusion == "success"
    assert done.output.title == "Fixed"
    got = (await gh.rest.checks.async_get("octo", "demo", run.id)).parsed_data
    assert got.completed_at is not None
    listed = (await gh.rest.checks.async_list_for_ref("octo", "demo", "main")).parsed_data
    assert listed.total_count == 1 and listed.check_runs[0].id == run.id


async def test_rate_limit(world: World) -> None:
    gh = world.github()
    first = await gh.rest.rate_limit.async_get()
    assert first.parsed_data.resources.core.limit == 5000
    assert int(first.headers["x-ratelimit-remaining"]) <= 5000


async def test_hook_deliveries_for_the_app(world: World) -> None:
    await world.client.create_issue("octo", "demo", as_user="alice", title="x")
    await world.client.deliveries.wait()
    app_gh = world.app_github()
    deliveries = (await app_gh.rest.apps.async_list_webhook_deliveries()).parsed_data
    assert deliveries and deliveries[0].event == "issues"
    one = (await app_gh.rest.apps.async_get_webhook_delivery(deliveries[0].id)).parsed_data
    assert one.guid == deliveries[0].guid
    again = await app_gh.rest.apps.async_redeliver_webhook_delivery(deliveries[0].id)
    assert again.status_code == 202


async def test_base_path_is_honoured(world: World) -> None:
    raw = await world.client._http.get("/repos/octo/demo")  # no /api/v3 prefix
    assert raw.status_code == 404


# -- response shapes compared with GitHub's description (issue 22, point 11) ----


def _raw(world: World, login: str = "alice") -> Any:
    import httpx

    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=world.emulator.asgi()),
        base_url=world.client.api_url,
        headers={"Authorization": f"token {world.client.tokens[login]}"},
    )


async def test_422_carries_resource_field_and_code(world: World) -> None:
    async with _raw(world) as http:
        answer = await http.post("/repos/octo/demo/issues", json={"body": "no title"})
    assert answer.status_code == 422
    body = answer.json()
    assert body["message"] == "Validation Failed"
    assert body["errors"] == [{"resource": "Issue", "field": "title", "code": "missing_field"}]
    assert body["documentation_url"].startswith("https://docs.github.com/")
    assert answer.headers["x-ratelimit-remaining"]  # error answers count and say so


async def test_a_custom_422_error_has_its_own_message(world: World, make_branch: Any) -> None:
    await make_branch("feature", {"a.txt": "a\n"})
    new_pr = {"title": "t", "head": "feature", "base": "main"}
    async with _raw(world) as http:
        assert (await http.post("/repos/octo/demo/pulls", json=new_pr)).status_code == 201
        again = await http.post("/repos/octo/demo/pulls", json=new_pr)
    assert again.status_code == 422
    [error] = again.json()["errors"]
    assert error["resource"] == "PullRequest" and error["code"] == "custom"
    assert error["message"] == "A pull request already exists for octo:feature."


async def test_201_names_the_created_resource_in_location(world: World) -> None:
    async with _raw(world) as http:
        created = await http.post("/repos/octo/demo/issues", json={"title": "x"})
    assert created.status_code == 201
    assert created.headers["location"] == created.json()["url"]
    assert created.headers["location"].endswith("/repos/octo/demo/issues/1")


async def test_link_pagination_keeps_every_filter(world: World) -> None:
    async with _raw(world) as http:
        for n in range(3):
            number = (await http.post("/repos/octo/demo/issues", json={"title": f"i{n}"})).json()
            await http.patch(
                f"/repos/octo/demo/issues/{number['number']}", json={"state": "closed"}
            )
        await http.post("/repos/octo/demo/issues", json={"title": "open one"})
        page = await http.get(
            "/repos/octo/demo/issues",
            params={"state": "closed", "per_page": "1", "sort": "created"},
        )
    assert [i["state"] for i in page.json()] == ["closed"]
    links = dict(
        (rel.split('"')[1], url.strip("<> "))
        for url, rel in (part.split(";") for part in page.headers["link"].split(","))
    )
    assert set(links) == {"next", "last"}
    for url in links.values():
        assert "state=closed" in url and "sort=created" in url and "per_page=1" in url
    assert links["last"].endswith("page=3")


async def test_rate_limit_headers_on_error_answers(world: World) -> None:
    async with _raw(world) as http:
        missing = await http.get("/repos/octo/nothing-here")
        refused = await http.get("/repos/octo/demo", headers={"Authorization": "token bogus"})
    assert missing.status_code == 404 and missing.headers["x-ratelimit-limit"] == "5000"
    assert refused.status_code == 401 and refused.headers["x-ratelimit-limit"] == "60"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/no/such/route"),
        ("DELETE", "/repos/octo/demo/issues"),  # a known path, a method it does not take
        ("PUT", "/repos/octo/demo"),
    ],
)
async def test_unknown_routes_and_methods_answer_githubs_json_404(
    world: World, method: str, path: str
) -> None:
    async with _raw(world) as http:
        answer = await http.request(method, path)
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.json()["message"] == "Not Found"
    assert answer.json()["documentation_url"].startswith("https://docs.github.com/")


async def test_paths_outside_the_api_and_git_answer_json_404(world: World) -> None:
    answer = await world.client._http.get("/definitely/not/a/git/path")
    assert answer.status_code == 404 and answer.json()["message"] == "Not Found"


async def test_a_422_about_no_field_is_githubs_plain_form(world: World) -> None:
    app_gh = world.app_github()
    with pytest.raises(RequestFailed) as failed:
        await app_gh.rest.apps.async_create_installation_access_token(
            world.installation_id, data={"repositories": ["not-a-repo"]}
        )
    body = failed.value.response.json()
    assert failed.value.response.status_code == 422
    assert body["message"].startswith("There is at least one repository")
    assert "errors" not in body

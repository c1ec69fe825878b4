"""Authentication and permissions, as GitHub enforces them."""

from __future__ import annotations

import time

import jwt
import pytest
from emu_helpers import World
from githubkit.exception import RequestFailed


async def _status(coro: object) -> int:
    with pytest.raises(RequestFailed) as err:
        await coro  # type: ignore[misc]
    return err.value.response.status_code


def _jwt(world: World, *, iat: float, exp: float) -> str:
    assert world.app.private_key_pem is not None
    claims = {"iss": str(world.app.id), "iat": int(iat), "exp": int(exp)}
    return jwt.encode(claims, world.app.private_key_pem, algorithm="RS256")


async def _get_app(world: World, token: str) -> int:
    resp = await world.client._http.get(
        world.client.base_path + "/app", headers={"Authorization": f"Bearer {token}"}
    )
    return resp.status_code


async def test_jwt_checks(world: World) -> None:
    now = time.time()
    assert await _get_app(world, _jwt(world, iat=now - 60, exp=now + 540)) == 200
    assert await _get_app(world, _jwt(world, iat=now - 600, exp=now - 10)) == 401  # expired
    assert await _get_app(world, _jwt(world, iat=now, exp=now + 1200)) == 401  # > 10 minutes
    assert (
        await _get_app(world, _jwt(world, iat=now + 600, exp=now + 900)) == 401
    )  # from the future
    other = await world.client.create_app(name="other")
    assert other.private_key_pem is not None
    forged = jwt.encode(
        {"iss": str(world.app.id), "iat": int(now), "exp": int(now + 300)},
        other.private_key_pem,
        algorithm="RS256",
    )
    assert await _get_app(world, forged) == 401  # signed with the wrong key
    assert await _get_app(world, "not.a.jwt") == 401


async def test_installation_token_expires(world: World) -> None:
    app_gh = world.app_github()
    token = (
        await app_gh.rest.apps.async_create_installation_access_token(world.installation_id)
    ).parsed_data.token
    resp = await world.client._http.get(
        world.client.base_path + "/repos/octo/demo", headers={"Authorization": f"token {token}"}
    )
    assert resp.status_code == 200
    await world.client.advance_clock(3601)
    resp = await world.client._http.get(
        world.client.base_path + "/repos/octo/demo", headers={"Authorization": f"token {token}"}
    )
    assert resp.status_code == 401 and resp.json()["message"] == "Bad credentials"


async def test_jwt_is_not_an_installation_token(world: World) -> None:
    now = time.time()
    resp = await world.client._http.get(
        world.client.base_path + "/repos/octo/demo",
        headers={"Authorization": f"Bearer {_jwt(world, iat=now - 60, exp=now + 500)}"},
    )
    assert resp.status_code == 403


async def test_read_only_user_cannot_merge_or_label(world: World) -> None:
    await world.client.push_as("alice", "octo", "demo", "fix", {"a.txt": "a"})
    gh = world.github()
    pr = (
        await gh.rest.pulls.async_create("octo", "demo", title="t", head="fix", base="main")
    ).parsed_data
    rita = world.user_github("rita")
    assert await _status(rita.rest.pulls.async_merge("octo", "demo", pr.number)) == 403
    assert (
        await _status(rita.rest.issues.async_add_labels("octo", "demo", pr.number, labels=["x"]))
        == 403
    )
    assert (
        await rita.rest.pulls.async_get("octo", "demo", pr.number)
    ).parsed_data.number == pr.number


async def test_other_installation_cannot_touch_the_repository(world: World) -> None:
    c = world.client
    await c.create_user("mallory")
    await c.create_repo_from_folder("mallory", "own", None)
    other = await c.create_installation(world.app.id, "mallory")
    gh = world.github(installation_id=other)
    assert await _status(gh.rest.repos.async_get("octo", "demo")) == 404
    assert await _status(gh.rest.issues.async_create("octo", "demo", title="x")) == 404


async def test_installation_permissions_are_enforced(world: World) -> None:
    c = world.client
    app = await c.create_app(name="reader", webhook_url="http://x.test/")
    inst = await c.create_installation(
        app.id, "octo", permissions={"metadata": "read", "issues": "read"}
    )
    reader = World(c, world.emulator, app, inst).github()
    assert (await reader.rest.issues.async_list_for_repo("octo", "demo")).parsed_data == []
    assert await _status(reader.rest.issues.async_create("octo", "demo", title="x")) == 403
    assert await _status(reader.rest.git.async_get_ref("octo", "demo", "heads/main")) == 403


async def test_narrowed_token(world: World) -> None:
    app_gh = world.app_github()
    token = (
        await app_gh.rest.apps.async_create_installation_access_token(
            world.installation_id, permissions={"issues": "read"}
        )
    ).parsed_data
    resp = await world.client._http.post(
        world.client.base_path + "/repos/octo/demo/issues",
        headers={"Authorization": f"token {token.token}"},
        json={"title": "x"},
    )
    assert resp.status_code == 403

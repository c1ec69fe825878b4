"""The emulator's OAuth web flow and user endpoints answer as GitHub does:
codes are single use and bound to the App and redirect URI, refusals are
200s with an ``error``, and the user endpoints parse into githubkit's models."""

from __future__ import annotations

from pathlib import Path

import httpx
from githubkit import GitHub, TokenAuthStrategy

from emulator.app import Emulator
from emulator.client import EmulatorClient

WEB = "http://github.test"


async def _authorize(http: httpx.AsyncClient, client_id: str, login: str) -> str:
    answer = await http.post(
        f"{WEB}/login/oauth/authorize",
        data={
            "client_id": client_id,
            "redirect_uri": "http://app.test/cb",
            "state": "s1",
            "login": login,
        },
    )
    assert answer.status_code == 302
    location = httpx.URL(answer.headers["location"])
    assert location.params["state"] == "s1"
    return location.params["code"]


async def test_oauth_web_flow_and_user_endpoints(tmp_path: Path) -> None:
    with Emulator(root=tmp_path) as emu:
        transport = httpx.ASGITransport(app=emu.asgi())
        async with (
            EmulatorClient(WEB, transport=transport) as gh,
            httpx.AsyncClient(transport=transport) as http,
        ):
            await gh.create_user("octo")
            await gh.create_user("eve")
            await gh.create_repo_from_folder("octo", "widgets", None, private=True)
            app = await gh.create_app(name="rb")
            other = await gh.create_app(name="other")
            inst = await gh.create_installation(app.id, "octo")
            page = await http.get(
                f"{WEB}/login/oauth/authorize", params={"client_id": app.client_id}
            )
            assert page.status_code == 200 and "Authorize rb" in page.text

            code = await _authorize(http, app.client_id, "octo")
            exchange = {
                "client_id": app.client_id,
                "client_secret": "wrong",
                "code": code,
                "redirect_uri": "http://app.test/cb",
            }
            json_accept = {"accept": "application/json"}
            refused = await http.post(
                f"{WEB}/login/oauth/access_token", data=exchange, headers=json_accept
            )
            assert refused.status_code == 200
            assert refused.json()["error"] == "incorrect_client_credentials"
            other_app = {
                **exchange,
                "client_id": other.client_id,
                "client_secret": other.client_secret,
            }
            wrong_app = await http.post(
                f"{WEB}/login/oauth/access_token", data=other_app, headers=json_accept
            )
            assert wrong_app.json()["error"] == "bad_verification_code"
            # The failed attempt used the code up, as GitHub does.
            code = await _authorize(http, app.client_id, "octo")
            good = {**exchange, "code": code, "client_secret": app.client_secret}
            token = (
                await http.post(f"{WEB}/login/oauth/access_token", data=good, headers=json_accept)
            ).json()
            assert token["access_token"].startswith("ghu_") and token["token_type"] == "bearer"
            reused = await http.post(
                f"{WEB}/login/oauth/access_token", data=good, headers=json_accept
            )
            assert reused.json()["error"] == "bad_verification_code"

            async with GitHub(
                TokenAuthStrategy(token["access_token"]), base_url=WEB, async_transport=transport
            ) as api:
                me = (await api.rest.users.async_get_authenticated()).parsed_data
                assert me.login == "octo"
                found = (
                    await api.rest.apps.async_list_installations_for_authenticated_user()
                ).parsed_data
                assert [i.id for i in found.installations] == [inst]
                repos = (
                    await api.rest.apps.async_list_installation_repos_for_authenticated_user(inst)
                ).parsed_data
                assert [(r.full_name, r.permissions.admin) for r in repos.repositories] == [
                    ("octo/widgets", True)
                ]

            # Someone without access to any of the installation's repositories sees none.
            code = await _authorize(http, app.client_id, "eve")
            eve = (
                await http.post(
                    f"{WEB}/login/oauth/access_token",
                    data={**good, "code": code},
                    headers=json_accept,
                )
            ).json()["access_token"]
            async with GitHub(
                TokenAuthStrategy(eve), base_url=WEB, async_transport=transport
            ) as api:
                found = (
                    await api.rest.apps.async_list_installations_for_authenticated_user()
                ).parsed_data
                assert found.total_count == 0

"""``DELETE /applications/{client_id}/token``: an App revokes a user token it
issued (sign-out uses it). Basic auth with the App's client id and secret;
the token stops working at once; anyone else gets GitHub's 404."""

from __future__ import annotations

import httpx
from emu_helpers import World

from emulator.state import Token


async def _user_token(world: World, login: str) -> str:
    store = world.emulator.store
    with store.lock:
        token = store.mint_token(
            Token(
                value=store.new_token_value("ghu_"),
                kind="user",
                expires_at=None,
                user_login=login,
                app_id=world.app.id,
            )
        )
    return token.value


async def test_the_app_revokes_a_user_token_it_issued(world: World) -> None:
    token = await _user_token(world, "alice")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=world.emulator.asgi()),
        base_url=world.client.api_url,
    ) as http:
        me = await http.get("user", headers={"authorization": f"Bearer {token}"})
        assert me.status_code == 200
        url = f"applications/{world.app.client_id}/token"
        wrong = await http.request(
            "DELETE",
            url,
            auth=(world.app.client_id, "not-the-secret"),
            json={"access_token": token},
        )
        assert wrong.status_code == 404
        missing = await http.request(
            "DELETE", url, auth=(world.app.client_id, world.app.client_secret), json={}
        )
        assert missing.status_code == 422
        done = await http.request(
            "DELETE",
            url,
            auth=(world.app.client_id, world.app.client_secret),
            json={"access_token": token},
        )
        assert done.status_code == 204
        after = await http.get("user", headers={"authorization": f"Bearer {token}"})
        assert after.status_code == 401
        again = await http.request(
            "DELETE",
            url,
            auth=(world.app.client_id, world.app.client_secret),
            json={"access_token": token},
        )
        assert again.status_code == 404

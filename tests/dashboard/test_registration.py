"""``repairbot register`` end to end against the emulator: our page posts the
manifest, the emulator's confirmation creates the App and sends the code back,
the conversion yields credentials, the file is 0600, the settings read it,
and the credentials work (the App authenticates and receives the events)."""

from __future__ import annotations

import html
import json
import re
import stat
from pathlib import Path

import httpx
import pytest

from app.config import ConfigError, Settings
from app.github.auth import AppCredentials
from app.github.client import GitHubClientFactory
from app.operations.registration import Registrar, manifest
from emulator.app import Emulator
from emulator.client import EmulatorClient
from handlers import build_router

GITHUB = "http://github.test"
REGISTRAR = "http://127.0.0.1:8765"
ROUTED = build_router().keys


def test_the_manifest_asks_only_for_what_the_app_uses() -> None:
    plain = manifest(
        name="rb",
        public_url="https://rb.example",
        redirect_url="http://x/cb",
        workflows=False,
        routed=ROUTED,
    )
    assert plain["default_events"] == [
        "issue_comment",
        "issues",
        "pull_request",
        "pull_request_review",
        "repository",
    ]
    assert "workflows" not in plain["default_permissions"]
    assert plain["hook_attributes"]["url"] == "https://rb.example/webhooks/github"
    assert plain["callback_urls"] == ["https://rb.example/auth/callback"]
    assert plain["url"] == "https://rb.example" and plain["public"] is False
    with_workflows = manifest(
        name="rb",
        public_url="https://rb.example",
        redirect_url="http://x/cb",
        workflows=True,
        routed=ROUTED,
    )
    assert with_workflows["default_permissions"]["workflows"] == "write"


@pytest.mark.parametrize("channel", ["", "https://smee.example/chan-1"], ids=["direct", "proxy"])
async def test_register_end_to_end(tmp_path: Path, channel: str) -> None:
    """``channel``: ``register --webhook-proxy``: GitHub delivers to the
    channel, and the credentials file tells ``repairbot dev`` where it is."""
    with Emulator(root=tmp_path / "github") as emu:
        transport = httpx.ASGITransport(app=emu.asgi())
        async with EmulatorClient(GITHUB, transport=transport) as gh:
            await gh.create_user("octo")
            out = tmp_path / "data" / "github-app.json"
            registrar = Registrar(
                name="repairbot-test",
                public_url="https://rb.example",
                own_url=REGISTRAR,
                github_web_url=GITHUB,
                github_api_url=GITHUB,
                out=out,
                routed=frozenset(ROUTED),
                workflows=True,
                transport=transport,
                webhook_url=channel,
            )
            browser = httpx.AsyncClient(
                mounts={
                    GITHUB: transport,
                    REGISTRAR: httpx.ASGITransport(app=registrar.asgi()),
                }
            )
            async with browser:
                page = await browser.get(f"{REGISTRAR}/")
                action = re.search(r"<form method='post' action='([^']+)'", page.text)
                field = re.search(r"name='manifest' value='([^']+)'", page.text)
                assert action and field
                raw_manifest = html.unescape(field.group(1))
                posted = json.loads(raw_manifest)
                assert posted["default_permissions"]["workflows"] == "write"
                confirm = await browser.post(
                    html.unescape(action.group(1)), data={"manifest": raw_manifest}
                )
                assert confirm.status_code == 200 and "Create GitHub App" in confirm.text
                state = re.search(r"name='state' value='([^']+)'", confirm.text)
                assert state
                created = await browser.post(
                    f"{GITHUB}/settings/apps/new/create",
                    data={
                        "manifest": raw_manifest,
                        "state": state.group(1),
                        "owner": "octo",
                    },
                )
                assert created.status_code == 302
                assert created.headers["location"].startswith(f"{REGISTRAR}/callback?code=")
                done = await browser.get(created.headers["location"])
                assert done.status_code == 200, done.text
                assert "installations/new" in done.text
                # The code is single use.
                again = await browser.get(created.headers["location"])
                assert again.status_code == 409
            assert stat.S_IMODE(out.stat().st_mode) == 0o600
            settings = Settings.from_env({"REPAIRBOT_DATA_DIR": str(tmp_path / "data")})
            assert settings.github_app_slug == "repairbot-test"
            assert settings.github_client_id.startswith("Iv1.")
            assert settings.github_client_secret and settings.github_webhook_secret
            with emu.store.lock:
                app = emu.store.apps[int(settings.github_app_id)]
            assert app.permissions["workflows"] == "write"
            assert app.events == posted["default_events"]
            assert app.webhook_url == (channel or "https://rb.example/webhooks/github")
            assert settings.webhook_proxy_url == channel
            assert app.webhook_secret == settings.github_webhook_secret
            # The private key is the App's: it authenticates as the App.
            factory = GitHubClientFactory(
                base_url=GITHUB,
                credentials=AppCredentials(settings.github_app_id, settings.github_private_key),
                transport=transport,
            )
            assert await factory.bot_login() == "repairbot-test[bot]"


def test_a_credentials_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "github-app.json"
    path.write_text(json.dumps({"app_id": 1, "pem": "x"}))
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        Settings.from_env({"REPAIRBOT_APP_FILE": str(path)})
    path.chmod(0o600)
    settings = Settings.from_env({"REPAIRBOT_APP_FILE": str(path), "GITHUB_APP_ID": "7"})
    assert settings.github_app_id == "7"  # a variable wins over the file
    assert settings.github_private_key == "x"


async def test_the_install_link_register_prints_works_on_the_emulator(tmp_path: Path) -> None:
    """``install it: <html_url>/installations/new``: the emulated GitHub serves
    that page, and installing there sends installation.created as GitHub does."""
    with Emulator(root=tmp_path / "github") as emu:
        transport = httpx.ASGITransport(app=emu.asgi())
        async with EmulatorClient(GITHUB, transport=transport) as gh:
            await gh.create_user("octo")
            app = await gh.create_app(name="repairbot-dev")
            async with httpx.AsyncClient(transport=transport, base_url=GITHUB) as browser:
                # The App's html_url is <web>/apps/<slug> (emulator/render/base.py).
                link = f"/apps/{app.slug}/installations/new"
                page = await browser.get(link)
                assert page.status_code == 200 and "Install repairbot-dev" in page.text
                done = await browser.post(link, data={"account": "octo"})
                assert done.status_code == 200 and "installed on octo" in done.text
                unknown = await browser.post(link, data={"account": "nobody"})
                assert unknown.status_code == 404
            with emu.store.lock:
                [inst] = [i for i in emu.store.installations.values() if i.app_id == app.id]
            assert inst.account.login == "octo"

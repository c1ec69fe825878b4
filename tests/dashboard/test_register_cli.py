"""``repairbot register`` as an operator runs it: a real process serving the
page, a real emulator over HTTP, the browser's steps done with httpx."""

from __future__ import annotations

import html
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.demo.serve import ServerThread, bind
from emulator.app import Emulator
from emulator.client import EmulatorClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def test_register_command_end_to_end(tmp_path: Path) -> None:
    with Emulator(root=tmp_path / "github") as emu:
        server = ServerThread(emu.asgi(), bind(), name="emulator").start()
        try:
            async with EmulatorClient(server.url) as gh:
                await gh.create_user("octo")
            probe = bind()
            port = probe.getsockname()[1]
            probe.close()
            env = {
                **os.environ,
                "REPAIRBOT_DATA_DIR": str(tmp_path / "data"),
                "GITHUB_WEB_URL": server.url,
                "GITHUB_API_URL": server.url,
            }
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "app.main.cli",
                    "register",
                    "--public-url",
                    "https://rb.example",
                    "--name",
                    "rb-cli",
                    "--port",
                    str(port),
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                async with httpx.AsyncClient(timeout=10) as browser:
                    page = None
                    # A loaded machine may take many seconds to start Python.
                    for _ in range(1500):
                        assert proc.poll() is None, proc.communicate()
                        try:
                            page = await browser.get(f"http://127.0.0.1:{port}/")
                            break
                        except httpx.ConnectError:
                            await _sleep(0.05)
                    assert page is not None and page.status_code == 200
                    action = html.unescape(re.findall(r"action='([^']+)'", page.text)[0])
                    manifest = html.unescape(
                        re.findall(r"name='manifest' value='([^']+)'", page.text)[0]
                    )
                    confirm = await browser.post(action, data={"manifest": manifest})
                    state = re.findall(r"name='state' value='([^']+)'", confirm.text)[0]
                    created = await browser.post(
                        f"{server.url}/settings/apps/new/create",
                        data={"manifest": manifest, "state": state, "owner": "octo"},
                    )
                    done = await browser.get(created.headers["location"])
                    assert done.status_code == 200 and "Registered" in done.text
                out, err = proc.communicate(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
            assert proc.returncode == 0, err
            assert "registered rb-cli" in out
            written = tmp_path / "data" / "github-app.json"
            assert stat.S_IMODE(written.stat().st_mode) == 0o600
        finally:
            server.stop()


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)

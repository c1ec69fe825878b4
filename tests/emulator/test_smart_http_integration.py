"""Real git over smart HTTP against the whole emulator: token auth, REST agreement, webhooks."""

from __future__ import annotations

from pathlib import Path

from emu_helpers import SECRET, WebhookSink
from git_helpers import GitClient, serve_asgi
from githubkit import AppInstallationAuthStrategy, GitHub
from githubkit.cache import MemCacheStrategy

from emulator.app import Emulator
from emulator.client import EmulatorClient


async def test_push_with_installation_token_moves_refs_and_announces(
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
            git = GitClient(home=tmp_path).with_token(token)
            work = tmp_path / "work"
            git.run("clone", "--quiet", f"{url}/octo/demo.git", str(work))
            sha = git.commit_file(work, "calc.py", "fixed\n", "fix add")
            git.run("push", "--quiet", "origin", "HEAD:refs/heads/fix", cwd=work)
            ref = (await gh.rest.git.async_get_ref("octo", "demo", "heads/fix")).parsed_data
            assert ref.object_.sha == sha == git.ls_remote(f"{url}/octo/demo.git")["refs/heads/fix"]
            await gh.rest.pulls.async_create("octo", "demo", title="t", head="fix", base="main")
            sha2 = git.commit_file(work, "calc.py", "fixed again\n", "again")
            git.run("push", "--quiet", "origin", "HEAD:refs/heads/fix", cwd=work)
            await c.deliveries.wait()
            bad = GitClient(home=tmp_path).with_token("ghs_nope")
            assert bad.run("ls-remote", f"{url}/octo/demo.git", check=False).returncode != 0
    pushes = [p for p in sink.events("push")]
    assert [(p["ref"], p["after"]) for p in pushes] == [
        ("refs/heads/fix", sha),
        ("refs/heads/fix", sha2),
    ]
    assert pushes[0]["sender"]["login"].endswith("[bot]")
    (sync,) = sink.events("pull_request", "synchronize")
    assert (sync["before"], sync["after"]) == (sha, sha2)

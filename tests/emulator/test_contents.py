"""``GET /repos/{owner}/{repo}/contents/{path}`` as GitHub answers it (the app
reads ``.github/repairbot.yml`` this way before cloning for a bot's label):
a file is base64 wrapped every 60 characters and parses into githubkit's
``ContentFile``; a directory is its entries; a missing path or ref is 404."""

from __future__ import annotations

import base64

import pytest
from emu_helpers import World
from githubkit.exception import RequestFailed

CONFIG = "trigger_label: fixme\nallowed_bots: [ci-helper[bot]]\n" + "# padding\n" * 20


async def test_a_file_is_base64_at_the_ref_asked_for(world: World) -> None:
    await world.client.push_as("alice", "octo", "demo", "main", {".github/repairbot.yml": CONFIG})
    gh = world.github()
    got = await gh.rest.repos.async_get_content("octo", "demo", ".github/repairbot.yml", ref="main")
    found = got.parsed_data
    assert found.type == "file" and found.encoding == "base64"  # type: ignore[union-attr]
    content = found.content  # type: ignore[union-attr]
    assert all(len(line) <= 60 for line in content.splitlines())
    assert base64.b64decode(content).decode() == CONFIG
    assert found.path == ".github/repairbot.yml" and found.size == len(CONFIG)  # type: ignore[union-attr]
    # At an older commit the file did not exist yet.
    with pytest.raises(RequestFailed) as err:
        await gh.rest.repos.async_get_content(
            "octo", "demo", ".github/repairbot.yml", ref=world.head
        )
    assert err.value.response.status_code == 404


async def test_a_directory_lists_its_entries_and_missing_paths_are_404(world: World) -> None:
    await world.client.push_as("alice", "octo", "demo", "main", {".github/repairbot.yml": CONFIG})
    gh = world.github()
    listed = (await gh.rest.repos.async_get_content("octo", "demo", ".github")).json()
    assert [(e["type"], e["path"]) for e in listed] == [("file", ".github/repairbot.yml")]
    for path, ref in (("nope.txt", "main"), ("calc.py", "no-such-branch")):
        with pytest.raises(RequestFailed) as err:
            await gh.rest.repos.async_get_content("octo", "demo", path, ref=ref)
        assert err.value.response.status_code == 404

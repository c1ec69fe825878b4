"""``GET /contents/{path}``: a file at a ref, base64, in githubkit's model."""

from __future__ import annotations

import base64

import pytest
from emu_helpers import World
from githubkit.exception import RequestFailed


async def test_a_file_at_the_default_branch_and_at_a_ref(world: World) -> None:
    gh = world.github()
    got = (await gh.rest.repos.async_get_content("octo", "demo", "calc.py")).parsed_data
    assert got.type == "file" and got.path == "calc.py"  # type: ignore[union-attr]
    text = base64.b64decode(got.content).decode()  # type: ignore[union-attr]
    assert text == "def add(a, b):\n    return a - b\n"
    pushed = await world.client.push_as(
        "alice", "octo", "demo", "cfg", {".github/repairbot.yml": "trigger_label: fixme\n"}
    )
    at_ref = await gh.rest.repos.async_get_content(
        "octo", "demo", ".github/repairbot.yml", ref=pushed["sha"]
    )
    assert base64.b64decode(at_ref.parsed_data.content) == b"trigger_label: fixme\n"  # type: ignore[union-attr]


async def test_missing_path_or_ref_is_404(world: World) -> None:
    gh = world.github()
    for path, ref in (("nope.txt", None), ("calc.py", "no-such-branch")):
        with pytest.raises(RequestFailed) as err:
            await gh.rest.repos.async_get_content("octo", "demo", path, ref=ref)
        assert err.value.response.status_code == 404

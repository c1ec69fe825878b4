"""Every secret file the settings read is hidden from sandboxed commands."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from app.config import Settings


def test_every_file_setting_is_hidden(tmp_path: Path) -> None:
    files = {
        field.name: tmp_path / field.name
        for field in dataclasses.fields(Settings)
        if field.name.endswith("_file")
    }
    assert {"app_file", "github_private_key_file"} <= set(files)  # the ones known today
    hidden = Settings(data_dir=tmp_path / "data", **files).isolation().hidden  # type: ignore[arg-type]
    assert set(files.values()) <= set(hidden)


def test_the_egress_allow_list_is_the_operators_setting() -> None:
    from app.config import ConfigError
    from app.sandbox.egress import DEFAULT_ALLOW

    assert Settings.from_env({}).egress_policy().allow == DEFAULT_ALLOW
    chosen = Settings.from_env(
        {
            "REPAIRBOT_EGRESS_ALLOW": "pypi.org, Mirror.Example:8443",
            "REPAIRBOT_EGRESS_ALLOW_PRIVATE": "registry.internal:3141",
        }
    )
    policy = chosen.egress_policy()
    assert policy.allow == ("pypi.org", "mirror.example:8443")
    assert policy.allow_private == ("registry.internal:3141",)
    assert Settings.from_env(chosen.to_env()).egress_policy() == policy
    nowhere = Settings.from_env({"REPAIRBOT_EGRESS_ALLOW": "none"})
    assert nowhere.egress_policy().allow == ()
    assert Settings.from_env(nowhere.to_env()).egress_allow == ()
    for name, value in (
        ("REPAIRBOT_EGRESS_ALLOW", "pypi.org:http"),
        ("REPAIRBOT_EGRESS_ALLOW", "http://pypi.org/"),
        ("REPAIRBOT_EGRESS_ALLOW_PRIVATE", "registry.internal"),
    ):
        try:
            Settings.from_env({name: value})
        except ConfigError as exc:
            assert str(exc).startswith(name) and "\n" not in str(exc)
        else:
            raise AssertionError(f"{name}={value!r} was accepted")

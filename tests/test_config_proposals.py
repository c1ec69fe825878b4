"""The proposal settings: where unreviewed agent code may be pushed."""

from __future__ import annotations

import pytest

from app.config import ConfigError, Settings


def test_by_default_there_is_no_proposal_owner_and_no_opt_in() -> None:
    settings = Settings.from_env({})
    assert settings.proposal_owner == ""
    assert settings.proposals_in_base_repository is False


def test_proposal_settings_travel_to_worker_processes() -> None:
    settings = Settings.from_env(
        {
            "REPAIRBOT_PROPOSAL_OWNER": "acme-repairbot",
            "REPAIRBOT_PROPOSALS_IN_BASE_REPOSITORY": "true",
        }
    )
    assert settings.proposal_owner == "acme-repairbot"
    assert settings.proposals_in_base_repository is True
    assert Settings.from_env(settings.to_env()) == settings


@pytest.mark.parametrize("owner", ["acme/repairbot", "-acme", "acme--bot", "a" * 40, "ac me"])
def test_a_proposal_owner_that_is_no_account_name_is_refused(owner: str) -> None:
    with pytest.raises(ConfigError, match="REPAIRBOT_PROPOSAL_OWNER"):
        Settings.from_env({"REPAIRBOT_PROPOSAL_OWNER": owner})


def test_the_opt_in_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match="REPAIRBOT_PROPOSALS_IN_BASE_REPOSITORY"):
        Settings.from_env({"REPAIRBOT_PROPOSALS_IN_BASE_REPOSITORY": "sure"})

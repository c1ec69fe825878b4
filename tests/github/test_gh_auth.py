from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from gh_scene import KeyPair, Scene

from app.config import Settings
from app.engine._errors import PermanentError
from app.github.auth import (
    AppCredentials,
    AppJWTAuthStrategy,
    CredentialsError,
    InstallationToken,
    InstallationTokenCache,
)
from app.github.client import GitHubClientFactory
from app.github.errors import classified

T0 = datetime(2024, 1, 1, tzinfo=UTC)


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class CountingMint:
    """Mints ``tok-1``, ``tok-2``, ... valid for an hour from the fake clock."""

    def __init__(self, clock: FakeClock, delay: float = 0.0) -> None:
        self.clock, self.delay, self.calls = clock, delay, 0

    async def __call__(self, installation_id: int) -> InstallationToken:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return InstallationToken(f"tok-{self.calls}", self.clock() + timedelta(hours=1))


# -- credentials ---------------------------------------------------------------------------------


def test_credentials_are_checked_at_start_without_echoing_the_key(app_key: KeyPair) -> None:
    with pytest.raises(CredentialsError, match="GITHUB_APP_ID"):
        AppCredentials("", app_key.private_pem)
    with pytest.raises(CredentialsError, match="GITHUB_PRIVATE_KEY"):
        AppCredentials("1", "")
    garbage = "-----BEGIN PRIVATE KEY-----\nnot-a-key-SECRETSECRET\n-----END PRIVATE KEY-----\n"
    with pytest.raises(CredentialsError) as caught:
        AppCredentials("1", garbage)
    assert "SECRETSECRET" not in str(caught.value) and caught.value.__cause__ is None
    ec_key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(CredentialsError, match="RSA"):
        AppCredentials("1", ec_key.decode())


def test_the_private_key_never_shows_in_a_repr(app_key: KeyPair) -> None:
    credentials = AppCredentials("42", app_key.private_pem)
    factory = GitHubClientFactory(base_url="http://github.invalid", credentials=credentials)
    strategy = AppJWTAuthStrategy("42", app_key.private_pem)
    flow = strategy.get_auth_flow(factory.app())
    token = InstallationToken("ghs_secret", T0)
    secret_line = app_key.private_pem.splitlines()[1]
    for thing in (credentials, factory, strategy, flow, factory.app().auth, token):
        assert secret_line not in repr(thing)
    assert "ghs_secret" not in repr(token)


def test_factory_from_settings(app_key: KeyPair) -> None:
    settings = Settings(
        github_api_url="https://ghe.example/api/v3",
        github_app_id="42",
        github_private_key=app_key.private_pem,
    )
    factory = GitHubClientFactory.from_settings(settings)
    assert str(factory.app().config.base_url) == "https://ghe.example/api/v3/"
    assert factory.app().config.auto_retry is None  # retries belong to the runtime
    with pytest.raises(CredentialsError):
        GitHubClientFactory.from_settings(Settings())


# -- the token cache -------------------------------------------------------------------------


async def test_tokens_are_reused_until_the_margin() -> None:
    clock = FakeClock()
    mint = CountingMint(clock)
    cache = InstallationTokenCache(mint, refresh_margin=timedelta(minutes=5), clock=clock)
    first = await cache.get(7)
    clock.now += timedelta(minutes=54, seconds=59)
    assert await cache.get(7) is first
    clock.now += timedelta(seconds=2)  # less than five minutes left: replace it
    assert (await cache.get(7)).token == "tok-2"
    assert await cache.get(8) != first  # per installation
    assert mint.calls == 3


async def test_concurrent_callers_share_one_mint() -> None:
    clock = FakeClock()
    mint = CountingMint(clock, delay=0.01)
    cache = InstallationTokenCache(mint, clock=clock)
    tokens = await asyncio.gather(*(cache.get(1) for _ in range(10)))
    assert {t.token for t in tokens} == {"tok-1"} and mint.calls == 1


async def test_invalidate_forgets_only_the_token_that_failed() -> None:
    clock = FakeClock()
    cache = InstallationTokenCache(CountingMint(clock), clock=clock)
    stale = await cache.get(1)
    cache.invalidate(1, stale)
    fresh = await cache.get(1)
    cache.invalidate(1, stale)  # a second 401 from an old request: keep the new token
    assert await cache.get(1) is fresh and fresh.token == "tok-2"


# -- against the emulator --------------------------------------------------------------------


async def test_one_mint_serves_many_requests(scene: Scene) -> None:
    for _ in range(3):
        await scene.gh.rest.repos.async_get(scene.repo.owner, scene.repo.name)
    assert scene.factory.tokens.mints == 1
    assert await scene.factory.bot_login() == "repairbot[bot]"
    token = await scene.factory.installation_token(scene.installation_id)
    assert token.token.startswith("ghs_") and token.expires_at > datetime.now(UTC)
    # The whole installation's token names no repository.
    assert token.repository_ids == ()


async def test_a_token_for_one_repository_carries_its_id(scene: Scene) -> None:
    """What the worker's git object cache is keyed by: the numeric id GitHub
    answered for the name at the mint, not the name."""
    token = await scene.factory.installation_token(
        scene.installation_id, repository=scene.repo.full_name, permissions={"contents": "read"}
    )
    repo = scene.emulator.store.repo(scene.repo.owner, scene.repo.name)
    assert token.repository_ids == (repo.id,)


def factory_trusting_its_tokens(scene: Scene) -> GitHubClientFactory:
    """A factory whose cache never expires tokens by itself (margin 0, frozen clock)."""
    frozen = datetime.now(UTC)
    return scene.new_factory(refresh_margin=timedelta(0), clock=lambda: frozen)


@pytest.mark.parametrize("token_ttl", [timedelta(minutes=2)])
async def test_a_401_refreshes_the_token_once_and_retries(scene: Scene) -> None:
    factory = factory_trusting_its_tokens(scene)
    gh = factory.for_installation(scene.installation_id)
    await gh.rest.repos.async_get("octo", "demo")
    await scene.client.advance_clock(5 * 60)  # the emulator now thinks our token expired
    response = await gh.rest.issues.async_create(
        "octo", "demo", title="made after a refresh", body=None
    )
    assert factory.tokens.mints == 2
    assert response.parsed_data.number in scene.state().issues
    assert len(scene.state().issues) == 1  # the refused first attempt created nothing


async def test_a_refresh_that_fails_is_permanent(scene: Scene) -> None:
    factory = factory_trusting_its_tokens(scene)
    gh = factory.for_installation(scene.installation_id)
    await gh.rest.repos.async_get("octo", "demo")
    await scene.client.delete_installation(scene.installation_id)
    with pytest.raises(PermanentError, match="404"), classified():
        await gh.rest.repos.async_get("octo", "demo")
    assert factory.tokens.mints == 1  # the refresh was tried, and refused

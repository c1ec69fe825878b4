"""What a worker keeps between GitHub requests instead of rebuilding it per
request: the httpx client under each githubkit client, the App JWT, and one
statement per stored conditional answer (docs/benchmarks.md, CPU per repair
run). Each test pins one of them and that nothing observable changed."""

from __future__ import annotations

import asyncio
import tomllib
from datetime import UTC, datetime, timedelta
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from gh_scene import KeyPair, Scene
from sqlalchemy import Engine, event, func, select

from app.app_tables import GitHubConditional
from app.github.auth import JWT_LIFETIME, AppCredentials, AppJWT
from app.github.client import GitHubClientFactory
from app.github.conditional import DatabaseConditionalStore, Stored

T0 = datetime(2024, 1, 1, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]


async def test_an_installation_client_keeps_one_httpx_client(scene: Scene) -> None:
    gh = scene.factory.for_installation(scene.installation_id)
    await gh.rest.repos.async_get("octo", "demo")
    kept = gh._pooled
    await gh.rest.repos.async_get("octo", "demo")
    await gh.rest.issues.async_list_for_repo("octo", "demo")
    assert kept is not None and gh._pooled is kept


def _setting_a_cookie(app_key: KeyPair, seen: list[str | None]) -> GitHubClientFactory:
    """A factory whose GitHub answers every request with a ``Set-Cookie``,
    noting the ``Cookie`` header each request carried in ``seen``."""

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("cookie"))
        return httpx.Response(
            200,
            json={"id": 1, "slug": "repairbot"},
            headers={"set-cookie": "session=abc; Path=/"},
        )

    return GitHubClientFactory(
        base_url="https://github.test",
        credentials=AppCredentials("42", app_key.private_pem),
        transport=httpx.MockTransport(answer),
    )


async def test_the_kept_client_sends_no_cookie_back(app_key: KeyPair) -> None:
    seen: list[str | None] = []
    factory = _setting_a_cookie(app_key, seen)
    gh = factory.app()
    await gh.arequest("GET", "/app")
    await gh.arequest("GET", "/app")
    assert seen == [None, None]
    await factory.aclose()
    assert gh._pooled is None


async def test_an_answers_set_cookie_is_not_parsed(app_key: KeyPair, monkeypatch: Any) -> None:
    # The jar would refuse the cookie anyway; handing it every answer cost
    # 33 µs of CPU an answer (docs/benchmarks.md, CPU per GitHub request).
    parsed: list[str] = []
    real = CookieJar.extract_cookies

    def extract(jar: CookieJar, response: Any, request: Any) -> None:
        parsed.append(request.get_full_url())
        real(jar, response, request)

    monkeypatch.setattr(CookieJar, "extract_cookies", extract)
    factory = _setting_a_cookie(app_key, [])
    gh = factory.app()
    await gh.arequest("GET", "/app")
    await gh.arequest("GET", "/app")
    assert parsed == []
    assert gh._pooled is not None and not gh._pooled.cookies
    await factory.aclose()


async def test_concurrent_token_mints_sign_one_jwt(scene: Scene) -> None:
    # Distinct scopes: each is a mint of its own, all racing on an empty cache.
    scopes = [{}, {"contents": "read"}, {"issues": "read"}, {"metadata": "read"}]
    factory = scene.new_factory()
    tokens = await asyncio.gather(
        *(
            factory.installation_token(scene.installation_id, repository="demo", permissions=p)
            for p in scopes
        )
    )
    assert len({t.token for t in tokens}) == len(scopes)  # GitHub accepted the JWT each time
    assert factory.app().auth.jwts.signed == 1


def test_the_jwt_is_github_shaped_and_signed_again_before_it_expires(app_key: KeyPair) -> None:
    now = [T0]
    jwts = AppJWT("42", app_key.private_pem, clock=lambda: now[0])
    first = jwts.current()
    public = load_pem_private_key(app_key.private_pem.encode(), None).public_key()
    claims = jwt.decode(first, public, algorithms=["RS256"], options={"verify_exp": False})  # type: ignore[arg-type]
    assert claims["iss"] == "42"
    assert claims["exp"] - claims["iat"] == JWT_LIFETIME.total_seconds()
    assert claims["iat"] == int((T0 - timedelta(minutes=1)).timestamp())
    now[0] = T0 + timedelta(minutes=7)
    assert jwts.current() == first and jwts.signed == 1
    now[0] = T0 + timedelta(minutes=8)
    assert jwts.current() != first and jwts.signed == 2


def test_a_stored_answer_is_one_statement_and_a_later_one_replaces_it(db_engine: Engine) -> None:
    store = DatabaseConditionalStore(db_engine)
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        if not statement.lstrip().upper().startswith(("BEGIN", "COMMIT", "SELECT")):
            statements.append(statement)

    event.listen(db_engine, "before_cursor_execute", record)
    try:
        store._save(7, "k", Stored('"a"', "application/json", b"{}"))
        store._save(7, "k", Stored('"b"', "application/json", b"[]"))
    finally:
        event.remove(db_engine, "before_cursor_execute", record)
    assert len(statements) == 2 and all(s.lstrip().upper().startswith("INSERT") for s in statements)
    table = GitHubConditional.__table__  # type: ignore[attr-defined]
    with db_engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(table)).scalar() == 1
    loaded = store._load(7, "k")
    assert loaded == Stored('"b"', "application/json", b"[]")


def test_httpcore_can_ask_sniffio_which_loop_runs() -> None:
    # Without sniffio httpcore fails an import (a sys.path search) per request.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(r.startswith("sniffio") for r in project["dependencies"])
    import sniffio

    async def which() -> str:
        return str(sniffio.current_async_library())

    assert asyncio.run(which()) == "asyncio"

"""Git smart HTTP: the real git client against emulator.smart_http under uvicorn."""

from __future__ import annotations

import gzip
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from git_helpers import GitClient, basic_auth, serve_asgi

from emulator.faults import Fault, FaultRegistry
from emulator.git import ZERO_SHA, BareRepo, Identity, RefUpdate
from emulator.smart_http import GitAuthError, GitSmartHTTP

WRITE_TOKEN = "ghs_write_token"
READ_TOKEN = "ghs_read_token"
OTHER_TOKEN = "ghs_other_writer"


@dataclass(frozen=True)
class Principal:
    login: str
    permission: str


TOKENS = {
    WRITE_TOKEN: Principal("repairbot[bot]", "write"),
    OTHER_TOKEN: Principal("octocat", "write"),
    READ_TOKEN: Principal("reader", "read"),
}


def authorize(
    owner: str, repo: str, username: str | None, password: str | None, write: bool
) -> Principal:
    principal = TOKENS.get(password or "") if username == "x-access-token" else None
    if principal is None:
        raise GitAuthError(401)
    if write and principal.permission != "write":
        raise GitAuthError(403)
    return principal


Pushes = list[tuple[str, Principal, list[RefUpdate]]]


@dataclass
class Server:
    url: str
    repo: BareRepo
    faults: FaultRegistry
    home: Path
    pushes: Pushes

    @property
    def remote(self) -> str:
        return f"{self.url}/octo/hello.git"

    def client(self, token: str | None = WRITE_TOKEN) -> GitClient:
        return GitClient(self.home, token)

    def clone(self, name: str = "work", token: str = WRITE_TOKEN) -> Path:
        self.client(token).run("clone", "--quiet", self.remote, name)
        return self.home / name

    def refs(self) -> dict[str, str]:
        return self.repo.list_refs()


@dataclass
class _Host:
    """What the module's one server serves; each test points it at a fresh repository."""

    repos: dict[tuple[str, str], Path] = field(default_factory=dict)
    faults: FaultRegistry = field(default_factory=FaultRegistry)
    pushes: Pushes = field(default_factory=list)
    url: str = ""

    def resolve_repo(self, owner: str, name: str) -> Path | None:
        return self.repos.get((owner, name))

    async def on_refs_updated(
        self, owner: str, name: str, principal: object, updates: list[RefUpdate]
    ) -> None:
        assert isinstance(principal, Principal)
        self.pushes.append((f"{owner}/{name}", principal, updates))


@pytest.fixture(scope="module")
def host() -> Iterator[_Host]:
    """One uvicorn server per module: starting and stopping one costs more than a test."""
    host = _Host()
    app = GitSmartHTTP(
        resolve_repo=host.resolve_repo,
        authorize=authorize,
        on_refs_updated=host.on_refs_updated,
        faults=host.faults,
    )
    with serve_asgi(app) as url:
        host.url = url
        yield host


@pytest.fixture
def server(host: _Host, tmp_path: Path) -> Iterator[Server]:
    source = tmp_path / "seed"
    source.mkdir()
    (source / "README.md").write_text("hello\n")
    repo = BareRepo.create(tmp_path / "repos" / "octo" / "hello.git", source=source)
    home = tmp_path / "home"
    home.mkdir()
    host.repos = {("octo", "hello"): repo.path}
    host.faults.clear()
    host.pushes.clear()
    yield Server(host.url, repo, host.faults, home, host.pushes)
    host.repos = {}
    host.faults.clear()


def _main(server: Server) -> str:
    sha = server.repo.resolve("main")
    assert sha
    return sha


# ------------------------------------------------------------------ reading


def test_clone_fetch_and_ls_remote(server: Server) -> None:
    work = server.clone()
    assert (work / "README.md").read_text() == "hello\n"
    git = server.client()
    assert git.ls_remote(server.remote) == server.refs()
    # Move main on the server; a fetch brings the new commit.
    old = _main(server)
    new = server.repo.write_commit(old, {"NEWS": b"news\n"}, "News", Identity("S", "s@x"))
    server.repo.update_ref("main", new, old_sha=old)
    git.run("fetch", "--quiet", "origin", cwd=work)
    assert git.run("rev-parse", "origin/main", cwd=work).stdout.strip() == new
    assert git.run("show", "origin/main:NEWS", cwd=work).stdout == "news\n"
    assert server.pushes == []  # server-side moves are not pushes


def test_read_only_token_may_clone(server: Server) -> None:
    work = server.clone(token=READ_TOKEN)
    assert (work / "README.md").exists()


def test_fetch_by_sha_is_allowed(server: Server) -> None:
    work = server.home / "bysha"
    git = server.client()
    git.run("init", "--quiet", str(work))
    git.run("fetch", "--quiet", server.remote, _main(server), cwd=work)
    assert git.run("rev-parse", "FETCH_HEAD", cwd=work).stdout.strip() == _main(server)


# ------------------------------------------------------------------ pushing


def test_push_creates_updates_and_deletes_branches_and_reports_them(server: Server) -> None:
    work = server.clone()
    git = server.client()
    base = _main(server)
    feature = git.commit_file(work, "fix.txt", "fixed\n", "Fix")
    git.run("push", "--quiet", "origin", "HEAD:refs/heads/fix", cwd=work)
    git.run("push", "--quiet", "origin", "HEAD:main", cwd=work)
    git.run("push", "--quiet", "origin", ":refs/heads/fix", cwd=work)
    assert server.refs() == {"refs/heads/main": feature}
    bot = TOKENS[WRITE_TOKEN]
    assert server.pushes == [
        ("octo/hello", bot, [RefUpdate("refs/heads/fix", ZERO_SHA, feature)]),
        ("octo/hello", bot, [RefUpdate("refs/heads/main", base, feature)]),
        ("octo/hello", bot, [RefUpdate("refs/heads/fix", feature, ZERO_SHA)]),
    ]


def test_push_that_changes_nothing_reports_nothing(server: Server) -> None:
    work = server.clone()
    result = server.client().run("push", "origin", "main", cwd=work)
    assert "Everything up-to-date" in result.stderr
    assert server.pushes == []


def test_force_with_lease_accepted_when_expected_matches(server: Server) -> None:
    work = server.clone()
    git = server.client()
    base = _main(server)
    git.run("commit", "--quiet", "--amend", "-m", "Rewritten root", cwd=work)
    rewritten = git.run("rev-parse", "HEAD", cwd=work).stdout.strip()
    git.run(
        "push",
        "--quiet",
        "--atomic",
        f"--force-with-lease=refs/heads/main:{base}",
        "origin",
        "HEAD:refs/heads/main",
        cwd=work,
    )
    assert _main(server) == rewritten
    assert server.pushes[-1][2] == [RefUpdate("refs/heads/main", base, rewritten)]


def test_force_with_lease_refused_when_expected_is_stale(server: Server) -> None:
    work = server.clone()
    git = server.client()
    base = _main(server)
    stale = git.commit_file(work, "x.txt", "x\n", "Something else")  # not what main is at
    git.run("commit", "--quiet", "--amend", "-m", "Rewritten", cwd=work)
    result = git.run(
        "push",
        "--atomic",
        f"--force-with-lease=refs/heads/main:{stale}",
        "origin",
        "HEAD:refs/heads/main",
        cwd=work,
        check=False,
    )
    assert result.returncode != 0
    assert "stale info" in result.stderr
    assert _main(server) == base
    assert server.pushes == []


def test_create_only_lease(server: Server) -> None:
    """An empty expected value means "must not exist": refused for main, fine for a new ref."""
    work = server.clone()
    git = server.client()
    base = _main(server)
    head = git.commit_file(work, "y.txt", "y\n", "Y")
    refused = git.run(
        "push",
        "--atomic",
        "--force-with-lease=refs/heads/main:",
        "origin",
        "HEAD:refs/heads/main",
        cwd=work,
        check=False,
    )
    assert refused.returncode != 0 and "stale info" in refused.stderr
    assert _main(server) == base
    git.run(
        "push",
        "--quiet",
        "--atomic",
        "--force-with-lease=refs/heads/repair/1:",
        "origin",
        "HEAD:refs/heads/repair/1",
        cwd=work,
    )
    assert server.refs()["refs/heads/repair/1"] == head


def test_atomic_push_with_one_refused_ref_moves_nothing(server: Server) -> None:
    work = server.clone()
    git = server.client()
    base = _main(server)
    head = git.commit_file(work, "z.txt", "z\n", "Z")
    result = git.run(
        "push",
        "--atomic",
        "--force-with-lease=refs/heads/new-branch:",
        f"--force-with-lease=refs/heads/main:{'1' * 40}",
        "origin",
        "HEAD:refs/heads/new-branch",
        "HEAD:refs/heads/main",
        cwd=work,
        check=False,
    )
    assert result.returncode != 0
    assert server.refs() == {"refs/heads/main": base}
    assert head not in server.refs().values()
    assert server.pushes == []


def test_atomic_push_refused_by_the_server_when_a_ref_moves_under_it(server: Server) -> None:
    """The lease is checked again by receive-pack under its ref locks: a ref moved
    between the client's ref advertisement and its push makes the whole atomic push fail."""
    work = server.clone()
    git = server.client()
    base = _main(server)
    head = git.commit_file(work, "w.txt", "w\n", "W")
    fault = server.faults.add(Fault("git push", "delay", delay=0.5))
    other = server.repo.write_commit(base, {"other": b"o"}, "Other", Identity("O", "o@x"))

    def move_main_while_the_push_waits() -> None:
        deadline = time.monotonic() + 10
        while fault.fired == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.repo.update_ref("main", other, old_sha=base)

    mover = threading.Thread(target=move_main_while_the_push_waits)
    mover.start()
    result = git.run(
        "push",
        "--atomic",
        f"--force-with-lease=refs/heads/main:{base}",
        "--force-with-lease=refs/heads/side:",
        "origin",
        "HEAD:refs/heads/main",
        "HEAD:refs/heads/side",
        cwd=work,
        check=False,
    )
    mover.join()
    assert result.returncode != 0, result.stderr
    assert server.refs() == {"refs/heads/main": other}
    assert head not in server.refs().values()
    assert server.pushes == []


def test_concurrent_pushes_are_each_attributed_to_their_pusher(server: Server) -> None:
    works = {
        token: server.clone(f"w-{i}", token) for i, token in enumerate((WRITE_TOKEN, OTHER_TOKEN))
    }
    heads = {
        token: server.client(token).commit_file(work, f"{i}.txt", "x\n", f"c{i}")
        for i, (token, work) in enumerate(works.items())
    }

    def push(token: str) -> None:
        server.client(token).run(
            "push", "--quiet", "origin", f"HEAD:refs/heads/b-{token}", cwd=works[token]
        )

    threads = [threading.Thread(target=push, args=(token,)) for token in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seen = {principal.login: updates for _, principal, updates in server.pushes}
    assert seen == {
        TOKENS[token].login: [RefUpdate(f"refs/heads/b-{token}", ZERO_SHA, heads[token])]
        for token in works
    }


# ------------------------------------------------------------------ authentication


def test_missing_or_bad_credentials_get_401_with_a_basic_challenge(server: Server) -> None:
    url = f"{server.remote}/info/refs?service=git-upload-pack"
    for headers in ({}, {"Authorization": basic_auth("ghs_wrong")}):
        response = httpx.get(url, headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == 'Basic realm="GitHub"'
    result = server.client("ghs_wrong").run("ls-remote", server.remote, check=False)
    assert result.returncode != 0
    assert "terminal prompts disabled" in result.stderr or "401" in result.stderr


def test_read_only_principal_cannot_push(server: Server) -> None:
    work = server.clone(token=READ_TOKEN)
    reader = server.client(READ_TOKEN)
    base = _main(server)
    reader.commit_file(work, "r.txt", "r\n", "R")
    result = reader.run("push", "origin", "HEAD:main", cwd=work, check=False)
    assert result.returncode != 0
    assert "403" in result.stderr
    assert _main(server) == base
    response = httpx.get(
        f"{server.remote}/info/refs?service=git-receive-pack",
        headers={"Authorization": basic_auth(READ_TOKEN)},
    )
    assert response.status_code == 403
    assert "denied to x-access-token" in response.text


def test_unknown_repository(server: Server) -> None:
    url = f"{server.url}/octo/missing.git/info/refs?service=git-upload-pack"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": basic_auth(WRITE_TOKEN)}).status_code == 404
    assert httpx.get(f"{server.url}/octo/hello.git/objects/info/packs").status_code == 404
    dumb = httpx.get(
        f"{server.remote}/info/refs", headers={"Authorization": basic_auth(WRITE_TOKEN)}
    )
    assert dumb.status_code == 403


# ------------------------------------------------------------------ faults


def _push_new_commit(
    server: Server, name: str = "f.txt"
) -> tuple[str, str, subprocess.CompletedProcess[str]]:
    work = server.clone(f"w-{name}")
    git = server.client()
    head = git.commit_file(work, name, "f\n", "F")
    result = git.run("push", "origin", "HEAD:main", cwd=work, check=False)
    return _main(server), head, result


def test_fail_fault_refuses_the_push_and_applies_nothing(server: Server) -> None:
    base = _main(server)
    server.faults.add(Fault("git push", "fail", status=502))
    main, _, result = _push_new_commit(server)
    assert result.returncode != 0 and "502" in result.stderr
    assert main == base and server.pushes == []


@pytest.mark.parametrize("status", [403, 429])
def test_rate_limit_fault_refuses_the_push_with_its_status(server: Server, status: int) -> None:
    base = _main(server)
    server.faults.add(Fault("git push", "rate_limit", status=status, retry_after=7))
    main, _, result = _push_new_commit(server)
    assert result.returncode != 0 and str(status) in result.stderr
    assert main == base and server.pushes == []


def test_rate_limit_answer_carries_githubs_headers(server: Server) -> None:
    server.faults.add(Fault("git push", "rate_limit", rate_limit_style="x-ratelimit", status=429))
    server.faults.add(Fault("git push", "rate_limit", retry_after=7))
    url = f"{server.remote}/git-receive-pack"
    headers = {
        "Authorization": basic_auth(WRITE_TOKEN),
        "Content-Type": "application/x-git-receive-pack-request",
    }
    primary = httpx.post(url, headers=headers, content=b"not a real push")
    assert primary.status_code == 429
    assert primary.headers["x-ratelimit-remaining"] == "0"
    assert int(primary.headers["x-ratelimit-reset"]) > time.time()
    secondary = httpx.post(url, headers=headers, content=b"not a real push")
    assert secondary.status_code == 403
    assert secondary.headers["retry-after"] == "7"


def test_delay_fault_slows_the_push_which_then_succeeds(server: Server) -> None:
    server.faults.add(Fault("git push", "delay", delay=0.5))
    started = time.monotonic()
    main, head, result = _push_new_commit(server)
    assert result.returncode == 0
    assert time.monotonic() - started >= 0.5
    assert main == head


def test_drop_fault_applies_the_push_but_git_sees_a_failure(server: Server) -> None:
    base = _main(server)
    server.faults.add(Fault("git push", "drop"))
    _, head, result = _push_new_commit(server)
    assert result.returncode != 0
    # The reconcile path: ls-remote shows the push landed after all.
    assert server.client().ls_remote(server.remote)["refs/heads/main"] == head
    assert server.pushes == [
        ("octo/hello", TOKENS[WRITE_TOKEN], [RefUpdate("refs/heads/main", base, head)])
    ]


def test_fetch_faults(server: Server) -> None:
    work = server.clone()
    git = server.client()
    server.faults.add(Fault("git fetch", "fail", status=500))
    failed = git.run("fetch", "origin", cwd=work, check=False)
    assert failed.returncode != 0 and "500" in failed.stderr
    server.faults.add(Fault("git fetch", "drop"))
    assert git.run("fetch", "origin", cwd=work, check=False).returncode != 0
    git.run("fetch", "--quiet", "origin", cwd=work)  # each fault fired once; now it works
    assert [f.fired for f in server.faults.list()] == [1, 1]


# ------------------------------------------------------------------ protocol details


def _pkt(line: str) -> bytes:
    return f"{len(line) + 4:04x}{line}".encode()


def test_gzip_request_bodies_are_inflated(server: Server) -> None:
    request = _pkt("command=ls-refs\n") + b"0001" + _pkt("symrefs\n") + b"0000"
    response = httpx.post(
        f"{server.remote}/git-upload-pack",
        headers={
            "Authorization": basic_auth(WRITE_TOKEN),
            "Content-Type": "application/x-git-upload-pack-request",
            "Content-Encoding": "gzip",
            "Git-Protocol": "version=2",
        },
        content=gzip.compress(request),
    )
    assert response.status_code == 200
    assert f"{_main(server)} HEAD symref-target:refs/heads/main".encode() in response.content


async def test_sync_callbacks_run_off_the_event_loop(tmp_path: Path) -> None:
    """A plain-function authorizer and hook may block (take locks, run git): they run in
    worker threads, and the event loop keeps serving."""
    repo = BareRepo.create(tmp_path / "r.git")
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def blocking_authorize(*args: object) -> str:
        threads.append(threading.get_ident())
        return "principal"

    app = GitSmartHTTP(resolve_repo=lambda o, r: repo.path, authorize=blocking_authorize)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://emulator") as client:
        response = await client.get("/o/r.git/info/refs?service=git-upload-pack")
    assert response.status_code == 200
    assert b"# service=git-upload-pack" in response.content
    assert threads and threads[0] != loop_thread

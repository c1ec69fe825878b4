"""The model proxy: the agent holds a per-attempt token, the proxy adds the
key, and sends it only to the base URL the key is bound to.

Real parts: the proxy serves HTTP on a real unix socket, the client talks to
it over that socket, and the upstream is the fake provider on a real TCP port
(which answers 401 unless it gets the real key).
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.agent import CommandAgent
from app.agent.command import ModelAccess
from app.agent.proxy import ModelProxy, Upstream
from app.repo_config import Command
from app.sandbox.runner import Sandbox
from app.workspace import Workspace
from tests.agent.fake_llm import API_KEY, FakeLLM, Turn
from tests.agent.sample_repo import PYTHON
from tests.agent.test_command_agent import request

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def llm() -> AsyncIterator[FakeLLM]:
    with FakeLLM([Turn("hello"), Turn("again")]) as model:
        yield model


@pytest.fixture
async def proxy() -> AsyncIterator[ModelProxy]:
    async with httpx.AsyncClient() as upstream_client:
        # Its socket in a private directory of its own (a short path).
        server = ModelProxy(client=upstream_client, max_request_bytes=4096)
        async with server:
            yield server


@pytest.fixture
async def agent_side(proxy: ModelProxy) -> AsyncIterator[httpx.AsyncClient]:
    """What runs where the agent runs: a client of the proxy's socket."""
    transport = httpx.AsyncHTTPTransport(uds=str(proxy.socket_path))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8089") as client:
        yield client


def openai(llm: FakeLLM) -> Upstream:
    return Upstream(provider="openai", base_url=llm.openai_url, api_key=API_KEY)


async def test_the_proxy_adds_the_key_the_agent_never_holds(
    proxy: ModelProxy, agent_side: httpx.AsyncClient, llm: FakeLLM
) -> None:
    async with proxy.attempt(openai(llm)) as token:
        assert API_KEY not in token
        answer = await agent_side.post(
            "/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {token}"}
        )
    assert answer.status_code == 200  # the fake provider checked the real key
    assert answer.json()["choices"][0]["message"]["content"] == "hello"
    assert len(llm.requests) == 1


async def test_anthropic_clients_send_the_token_as_x_api_key(
    proxy: ModelProxy, agent_side: httpx.AsyncClient, llm: FakeLLM
) -> None:
    upstream = Upstream(provider="anthropic", base_url=llm.url, api_key=API_KEY)
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    async with proxy.attempt(upstream) as token:
        answer = await agent_side.post("/v1/messages", json=body, headers={"x-api-key": token})
    assert answer.status_code == 200, answer.text


async def test_a_token_is_worthless_after_its_attempt(
    proxy: ModelProxy, agent_side: httpx.AsyncClient, llm: FakeLLM
) -> None:
    async with proxy.attempt(openai(llm)) as token:
        pass
    late = await agent_side.post(
        "/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {token}"}
    )
    assert late.status_code == 401
    forged = await agent_side.post(
        "/chat/completions", json=CHAT, headers={"Authorization": "Bearer rbp-guessed"}
    )
    assert forged.status_code == 401
    assert llm.requests == []  # nothing reached the provider


async def raw_request(socket_path: Path, target: str, token: str) -> bytes:
    """Send ``target`` byte for byte, as a hostile client would (httpx would
    normalise it); the status line of the answer."""
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    body = json.dumps(CHAT).encode()
    writer.write(
        f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer.split(b"\r\n", 1)[0]


@pytest.mark.parametrize(
    "target",
    ["/../../elsewhere", "/%2e%2e/elsewhere", "/v1/..%2fchat/completions", "/a//b", "/./x"],
)
async def test_paths_cannot_leave_the_bound_base_url(
    proxy: ModelProxy, llm: FakeLLM, target: str
) -> None:
    async with proxy.attempt(openai(llm)) as token:
        status = await raw_request(proxy.socket_path, target, token)
    assert status == b"HTTP/1.1 400 Bad Request"
    assert llm.headers_seen == []  # nothing reached the provider


async def test_only_allow_listed_headers_are_forwarded(
    proxy: ModelProxy, agent_side: httpx.AsyncClient, llm: FakeLLM
) -> None:
    async with proxy.attempt(openai(llm)) as token:
        await agent_side.post(
            "/chat/completions",
            json=CHAT,
            headers={
                "Authorization": f"Bearer {token}",
                "Cookie": "session=agent",
                "X-Forwarded-Host": "attacker.example",
            },
        )
    seen = llm.headers_seen[0]
    assert "cookie" not in seen and "x-forwarded-host" not in seen
    assert seen["authorization"] == f"Bearer {API_KEY}"


async def test_large_requests_are_refused(
    proxy: ModelProxy, agent_side: httpx.AsyncClient, llm: FakeLLM
) -> None:
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 10_000}]}
    async with proxy.attempt(openai(llm)) as token:
        answer = await agent_side.post(
            "/chat/completions", json=big, headers={"Authorization": f"Bearer {token}"}
        )
    assert answer.status_code == 413 and llm.requests == []


async def test_the_operators_command_agent_gets_a_token_revoked_after_the_attempt(
    proxy: ModelProxy, agent_side: httpx.AsyncClient, llm: FakeLLM, workspace: Workspace
) -> None:
    # The agent records the environment it got, as the attacker did.
    script = "import json, os; json.dump(dict(os.environ), open('seen-env.json', 'w'))"
    agent = CommandAgent(
        Command(shell=f"{shlex.quote(PYTHON)} -c {shlex.quote(script)}"),
        time_limit=30,
        sandbox=Sandbox(heartbeat_interval=0.05),
        model_access=ModelAccess(
            proxy=proxy, upstream=openai(llm), address="http://127.0.0.1:8089"
        ),
    )
    proposal = await agent.propose(request(workspace))
    seen = json.loads((workspace.repo / "seen-env.json").read_text())
    token = seen["REPAIRBOT_MODEL_TOKEN"]
    assert seen["OPENAI_API_KEY"] == token and token.startswith("rbp-")
    assert seen["OPENAI_BASE_URL"] == "http://127.0.0.1:8089"
    assert API_KEY not in json.dumps(seen) and API_KEY not in proposal.patch
    late = await agent_side.post(
        "/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {token}"}
    )
    assert late.status_code == 401


ASK_THE_MODEL = """
import json, os, urllib.request
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "fix"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"},
)
answer = json.load(urllib.request.urlopen(request, timeout=20))
open("answer.txt", "w").write(answer["choices"][0]["message"]["content"] + "\\n")
"""


async def test_a_command_agent_in_the_sandbox_reaches_its_model_only_through_the_proxy(
    proxy: ModelProxy, llm: FakeLLM, workspace: Workspace
) -> None:
    pytest.importorskip("app.sandbox.forward", reason="the sandbox's port forward (sandbox-net)")
    agent = CommandAgent(
        Command(argv=[PYTHON, "-c", ASK_THE_MODEL]),
        time_limit=60,
        sandbox=Sandbox(heartbeat_interval=0.05),
        model_access=ModelAccess(
            proxy=proxy, upstream=openai(llm), address="http://127.0.0.1:8089"
        ),
    )
    proposal = await agent.propose(request(workspace))
    assert "+hello" in proposal.patch, proposal.transcript.decode(errors="replace")
    assert llm.headers_seen[0]["authorization"] == f"Bearer {API_KEY}"

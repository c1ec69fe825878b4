"""The HTTP back end against local fakes of the OpenAI and Anthropic APIs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from app.agent import AgentFailed, AgentRequest, Feedback, HttpAgent
from app.agent.http import retry_after
from app.engine.errors import PermanentError, TransientError
from app.workspace import Workspace
from tests.agent.fake_llm import ANTHROPIC_URL, API_KEY, OPENAI_URL, FakeLLM
from tests.agent.sample_repo import FIX_DIFF

TRACEBACK = """Traceback (most recent call last):
  File "{repo}/test_calc.py", line 8, in test_add
    self.assertEqual(add(2, 3), 5)
  File "{repo}/calc.py", line 5, in add
AssertionError: -1 != 5
"""
ANSWER = f"`add` subtracts instead of adding; use `+`.\n\n```diff\n{FIX_DIFF}```\n"


@pytest.fixture
def llm() -> FakeLLM:
    return FakeLLM()


@pytest.fixture
async def client(llm: FakeLLM) -> AsyncIterator[httpx.AsyncClient]:
    async with llm.client() as http:
        yield http


def agent(client: httpx.AsyncClient, provider: str = "openai", **kwargs: object) -> HttpAgent:
    base = OPENAI_URL if provider == "openai" else ANTHROPIC_URL
    params: dict[str, object] = {"model": "test-model", "api_key": API_KEY, "base_url": base}
    params.update(kwargs)
    return HttpAgent(provider=provider, client=client, **params)  # type: ignore[arg-type]


def request(ws: Workspace, **kwargs: object) -> AgentRequest:
    params: dict[str, object] = {
        "workspace": ws,
        "issue_title": "add() subtracts",
        "issue_body": "See the README.md for what add should do.",
        "reproduction": ["python -m unittest"],
        "reproduction_output": TRACEBACK.format(repo=ws.repo),
    }
    params.update(kwargs)
    return AgentRequest(**params)  # type: ignore[arg-type]


async def test_openai_proposal_applies_and_counts_tokens(
    workspace: Workspace, llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    llm.reply(ANSWER, input_tokens=1234, output_tokens=56)
    proposal = await agent(client).propose(request(workspace))
    assert "+    return a + b" in proposal.patch and proposal.files_changed == ["calc.py"]
    assert (proposal.input_tokens, proposal.output_tokens) == (1234, 56)
    assert proposal.backend == "http:openai/test-model"
    assert proposal.summary == "`add` subtracts instead of adding; use `+`."
    assert "return a + b" in (workspace.repo / "calc.py").read_text()
    seen = llm.seen[0]
    assert seen.body["model"] == "test-model" and seen.body["messages"][0]["role"] == "system"
    prompt = seen.prompt
    # The files the traceback points at are shown, deepest frame first.
    assert prompt.index("## calc.py") < prompt.index("## test_calc.py")
    assert "def add(a, b):\n    return a - b" in prompt and "## README.md" in prompt
    assert "AssertionError: -1 != 5" in prompt and "# Issue: add() subtracts" in prompt


async def test_anthropic_messages_api(
    workspace: Workspace, llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    llm.reply(ANSWER, input_tokens=900, output_tokens=70)
    proposal = await agent(client, "anthropic").propose(
        request(workspace, feedback=[Feedback(kind="review", text="keep the docstring")])
    )
    assert (proposal.input_tokens, proposal.output_tokens) == (900, 70)
    assert proposal.backend == "http:anthropic/test-model"
    seen = llm.seen[0]
    assert (
        seen.headers["x-api-key"] == API_KEY and seen.headers["anthropic-version"] == "2023-06-01"
    )
    assert "repairbot" in seen.body["system"] and seen.body["max_tokens"] == 4096
    assert "keep the docstring" in seen.prompt


async def test_an_unusable_answer_gets_one_more_turn_with_gits_complaint(
    workspace: Workspace, llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    llm.reply(
        "```diff\n" + FIX_DIFF.replace("a - b", "a // b") + "```",
        input_tokens=100,
        output_tokens=10,
    )
    llm.reply(ANSWER, input_tokens=200, output_tokens=20)
    proposal = await agent(client).propose(request(workspace))
    assert (proposal.input_tokens, proposal.output_tokens) == (300, 30)
    followup = llm.seen[1].body["messages"]
    assert [m["role"] for m in followup] == ["system", "user", "assistant", "user"]
    assert "`git apply` rejected the diff" in followup[-1]["content"]
    assert b"----- next turn -----" in proposal.transcript


async def test_no_usable_diff_after_all_turns_is_an_agent_failure(
    workspace: Workspace, llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    llm.reply("I think the bug is in add.")
    llm.reply("Still thinking.")
    with pytest.raises(AgentFailed, match="no diff that applies in 2 turn") as caught:
        await agent(client).propose(request(workspace))
    assert b"Still thinking." in caught.value.transcript
    assert (workspace.repo / "calc.py").read_text().count("a - b") == 1  # untouched


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_429_is_transient_and_honours_retry_after(
    workspace: Workspace, llm: FakeLLM, client: httpx.AsyncClient, provider: str
) -> None:
    llm.fail(
        429,
        {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}},
        {"retry-after": "7"},
    )
    with pytest.raises(TransientError, match="answered 429: Rate limit reached") as caught:
        await agent(client, provider).propose(request(workspace))
    assert caught.value.next_retry_delay == 7.0


async def test_retry_after_as_an_http_date(
    workspace: Workspace, llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    llm.fail(503, {"error": {"message": "overloaded"}}, {"retry-after": when})
    with pytest.raises(TransientError) as caught:
        await agent(client).propose(request(workspace))
    assert caught.value.next_retry_delay is not None and 25 <= caught.value.next_retry_delay <= 30


@pytest.mark.parametrize("status", [500, 502, 503, 529])
async def test_server_errors_are_transient(
    workspace: Workspace, llm: FakeLLM, client: httpx.AsyncClient, status: int
) -> None:
    llm.fail(
        status, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    with pytest.raises(TransientError, match=f"answered {status}: Overloaded") as caught:
        await agent(client, "anthropic").propose(request(workspace))
    assert caught.value.next_retry_delay is None


@pytest.mark.parametrize("status", [400, 403, 404])
async def test_client_errors_are_permanent(
    workspace: Workspace, llm: FakeLLM, client: httpx.AsyncClient, status: int
) -> None:
    llm.fail(
        status,
        {
            "error": {
                "message": "The model `test-model` does not exist",
                "type": "invalid_request_error",
            }
        },
    )
    with pytest.raises(
        PermanentError, match=f"answered {status}: The model `test-model` does not exist"
    ):
        await agent(client).propose(request(workspace))


async def test_a_wrong_key_is_permanent_and_never_echoed(
    workspace: Workspace, client: httpx.AsyncClient
) -> None:
    with pytest.raises(PermanentError, match="401: Incorrect API key") as caught:
        await agent(client, api_key="sk-wrong-key").propose(request(workspace))
    assert "sk-wrong-key" not in str(caught.value)
    assert "sk-wrong-key" not in repr(agent(client, api_key="sk-wrong-key"))


async def test_exhausted_quota_is_permanent(
    workspace: Workspace, llm: FakeLLM, client: httpx.AsyncClient
) -> None:
    llm.fail(
        429, {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}
    )
    with pytest.raises(PermanentError, match="quota"):
        await agent(client).propose(request(workspace))


async def test_transport_errors_and_garbled_bodies_are_transient(workspace: Workspace) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as refused:
        with pytest.raises(TransientError, match="unreachable: ConnectError"):
            await agent(refused).propose(request(workspace))
    garbled = httpx.MockTransport(lambda request: httpx.Response(200, text="<html>proxy</html>"))
    async with httpx.AsyncClient(transport=garbled) as proxy:
        with pytest.raises(TransientError, match="unexpected body"):
            await agent(proxy).propose(request(workspace))


async def test_a_real_closed_port_is_transient(workspace: Workspace) -> None:
    async with httpx.AsyncClient() as http:
        with pytest.raises(TransientError, match="unreachable"):
            await agent(http, base_url="http://127.0.0.1:9/v1").propose(request(workspace))


def test_retry_after_forms() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert retry_after(httpx.Headers({"retry-after": "12"})) == 12.0
    assert retry_after(httpx.Headers({"retry-after": "1.5"})) == 1.5
    assert retry_after(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    date = format_datetime(now + timedelta(seconds=90), usegmt=True)
    assert retry_after(httpx.Headers({"retry-after": date}), now=now) == 90.0
    past = format_datetime(now - timedelta(seconds=90), usegmt=True)
    assert retry_after(httpx.Headers({"retry-after": past}), now=now) == 0.0
    assert retry_after(httpx.Headers({"retry-after": "999999"})) == 3600.0
    assert retry_after(httpx.Headers({"retry-after": "soon"})) is None
    assert retry_after(httpx.Headers({})) is None

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from webhook_examples import example_files, load

from app.webhooks.events import (
    IssueCommentEvent,
    IssuesEvent,
    PayloadError,
    PullRequestEvent,
    PullRequestReviewEvent,
    UnknownEvent,
    parse_event,
)


def test_every_example_parses(example: Path) -> None:
    event, body = example.parent.name, example.read_bytes()
    parsed = parse_event(event, body)
    assert not isinstance(parsed, UnknownEvent)
    expected_action = None if event in ("push", "ping") else example.stem
    assert parsed.key == (event, expected_action)
    assert parsed.sender.login


def test_an_example_githubkit_rejects_still_parses(payload_of: Any) -> None:
    """Why parsing is lenient: real payloads lack fields newer schemas require.

    (10 of the 21 examples here fail githubkit's strict models; one is checked,
    since building those models takes seconds.)
    """
    from githubkit.webhooks import parse_obj
    from pydantic import ValidationError

    payload = payload_of("issues", "labeled")
    with pytest.raises(ValidationError):
        parse_obj("issues", payload)
    assert isinstance(parse_event("issues", payload), IssuesEvent)


def test_issue_labeled_fields(payload_of: Any) -> None:
    parsed = parse_event("issues", payload_of("issues", "labeled"))
    assert isinstance(parsed, IssuesEvent)
    assert parsed.label is not None and parsed.label.name == "bug"
    assert parsed.issue.number == 1 and parsed.issue.state == "open"
    assert "bug" in parsed.issue.label_names
    assert not parsed.issue.is_pull_request
    assert parsed.repository.full_name == "Codertocat/Hello-World"
    assert parsed.repository.owner.login == "Codertocat"
    assert parsed.repository.default_branch == "master"
    assert parsed.installation is None  # a repository webhook, not an App delivery


def test_review_fields_and_state_normalised(payload_of: Any) -> None:
    payload = payload_of("pull_request_review", "submitted")
    payload["review"]["state"] = "APPROVED"  # the REST spelling
    parsed = parse_event("pull_request_review", payload)
    assert isinstance(parsed, PullRequestReviewEvent)
    assert parsed.review.state == "approved"
    assert parsed.review.commit_id == parsed.pull_request.head.sha
    assert parsed.review.body == ""  # null in the payload
    assert parsed.review.submitted_at is not None and parsed.review.submitted_at.tzinfo
    assert parsed.pull_request.merged is None  # review payloads do not say
    assert parsed.installation is not None and parsed.installation.id == 1


def test_pull_request_and_comment_fields(payload_of: Any) -> None:
    pr = parse_event("pull_request", payload_of("pull_request", "closed"))
    assert isinstance(pr, PullRequestEvent)
    assert pr.pull_request.merged is False and pr.pull_request.head.ref == "changes"
    comment = parse_event("issue_comment", payload_of("issue_comment", "created"))
    assert isinstance(comment, IssueCommentEvent)
    assert comment.comment.user.login == "Codertocat" and comment.comment.id == 492700400


def test_issue_that_is_a_pull_request(payload_of: Any) -> None:
    payload = payload_of("issue_comment", "created")
    payload["issue"]["pull_request"] = {"url": "https://api.github.com/repos/o/r/pulls/1"}
    parsed = parse_event("issue_comment", payload)
    assert isinstance(parsed, IssueCommentEvent) and parsed.issue.is_pull_request


@pytest.mark.parametrize(
    ("event", "action", "path", "field"),
    [
        ("issues", "labeled", ("issue", "number"), "issue.number"),
        ("issues", "labeled", ("label",), "label"),
        ("issue_comment", "created", ("comment", "user"), "comment.user"),
        ("pull_request", "opened", ("pull_request", "head", "sha"), "pull_request.head.sha"),
        ("pull_request_review", "submitted", ("review", "commit_id"), "review.commit_id"),
        ("installation", "created", ("installation", "account"), "installation.account"),
        ("issues", "opened", ("repository",), "repository"),
        ("issues", "opened", ("action",), "action"),
        ("issues", "opened", ("sender",), "sender"),
    ],
)
def test_missing_needed_field_names_it(
    payload_of: Any, event: str, action: str, path: tuple[str, ...], field: str
) -> None:
    payload = payload_of(event, action)
    parent = payload
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    with pytest.raises(PayloadError) as caught:
        parse_event(event, payload)
    assert field in str(caught.value)
    assert caught.value.event == event


def test_wrong_type_is_a_payload_error(payload_of: Any) -> None:
    payload = payload_of("issues", "opened")
    payload["issue"]["number"] = "not a number"
    with pytest.raises(PayloadError, match=r"issue\.number"):
        parse_event("issues", payload)


@pytest.mark.parametrize("body", [b"", b"{", b"\xff\xfe", b"[]", b"null", b'"text"'])
def test_body_that_is_not_a_json_object(body: bytes) -> None:
    with pytest.raises(PayloadError):
        parse_event("issues", body)


def test_unknown_event_is_not_an_error() -> None:
    parsed = parse_event("deployment_status", b'{"action": "created", "whatever": 1}')
    assert isinstance(parsed, UnknownEvent)
    assert parsed.key == ("deployment_status", "created")


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, child in value.items():
            found.append((*prefix, key))
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_damaged_payloads_parse_or_raise_payload_error(data: st.DataObject) -> None:
    """Delete or replace any one field of any example: never anything but PayloadError."""
    path = data.draw(st.sampled_from(example_files()))
    payload = load(path)
    target = data.draw(st.sampled_from(_paths(payload)))
    parent = payload
    for key in target[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()):
        del parent[target[-1]]
    else:
        parent[target[-1]] = data.draw(
            st.one_of(st.none(), st.integers(), st.text(max_size=5), st.just([]), st.just({}))
        )
    with contextlib.suppress(PayloadError):
        parse_event(path.parent.name, json.dumps(payload))


def test_a_raw_body_parses_as_its_decoded_object(example: Path) -> None:
    """Raw bytes take pydantic's own JSON reader; a decoded object the
    long way: the same event either way."""
    event, body = example.parent.name, example.read_bytes()
    assert parse_event(event, body) == parse_event(event, json.loads(body))


def test_a_raw_body_missing_a_field_is_told_as_a_decoded_one(payload_of: Any) -> None:
    payload = payload_of("issues", "opened")
    del payload["issue"]["number"]
    with pytest.raises(PayloadError) as raw:
        parse_event("issues", json.dumps(payload).encode())
    with pytest.raises(PayloadError) as decoded:
        parse_event("issues", payload)
    assert str(raw.value) == str(decoded.value)
    assert raw.value.field == decoded.value.field == "issue.number"


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda body: b"\xef\xbb\xbf" + body, id="utf-8 byte order mark"),
        pytest.param(
            lambda body: body.replace(b'"title": "', b'"title": "\\ud800', 1),
            id="lone surrogate escape",
        ),
    ],
)
def test_a_body_only_the_standard_decoder_reads_still_parses(payload_of: Any, damage: Any) -> None:
    """pydantic's JSON reader refuses what ``json.loads`` takes (a byte order
    mark, an unpaired surrogate escape): such a body parses as it always did."""
    body = damage(json.dumps(payload_of("issues", "opened")).encode())
    assert body != json.dumps(payload_of("issues", "opened")).encode()
    parsed = parse_event("issues", body)
    assert isinstance(parsed, IssuesEvent)
    assert parsed == parse_event("issues", json.loads(body))

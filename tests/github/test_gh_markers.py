from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.github.markers import (
    MAX_BODY,
    Marker,
    OpId,
    defang,
    find_marked,
    parse_marker,
    parse_markers,
    strip_markers,
    with_marker,
)

OP = OpId("run-7f3a", "status-comment")


@dataclass
class Item:
    id: int
    body: str | None


def test_render_is_readable_and_stable() -> None:
    marker = Marker(OP, {"sha": "a" * 40, "attempt": "2"})
    assert marker.render() == (
        "<!-- repairbot:op=run-7f3a:status-comment attempt=2 sha=" + "a" * 40 + " -->"
    )


def test_parse_amid_surrounding_text() -> None:
    marker = Marker(OP, {"sha": "abc"})
    text = f"Status: running\n\nsome **markdown**{marker.render()}trailing words"
    assert parse_markers(text) == [marker]


def test_op_token_round_trips_runs_with_colons() -> None:
    op = OpId("wf:123", "step:a b")
    assert op.token == "wf%3A123:step%3Aa%20b"
    assert OpId.from_token(op.token) == op
    assert OpId("wf", "123:step") != op  # different ops stay different after encoding
    with pytest.raises(ValueError):
        OpId.from_token("no-separator")


def test_invalid_keys_and_empty_parts_are_refused() -> None:
    with pytest.raises(ValueError):
        Marker(OP, {"Bad Key": "x"})
    with pytest.raises(ValueError):
        OpId("", "step")


def test_malformed_and_foreign_comments_are_ignored() -> None:
    text = "\n".join(
        [
            "<!-- repairbot:op=run -->",  # no step
            "<!-- otherbot:op=a:b -->",
            "<!-- repairbot:op=a:b sha=x sha=y -->",  # repeated key: not something we write
            "<!-- repairbot:op=a:b note=has space -->",  # unencoded space
            "<!-- repairbot:op=a:b",  # unclosed
        ]
    )
    assert parse_markers(text) == []


def test_with_marker_replaces_old_markers() -> None:
    first = with_marker("body v1", Marker(OP, {"sha": "1"}))
    second = with_marker(first.replace("v1", "v2"), Marker(OP, {"sha": "2"}))
    assert parse_markers(second) == [Marker(OP, {"sha": "2"})]
    assert strip_markers(second).strip() == "body v2"


def test_a_long_body_is_cut_but_keeps_its_marker() -> None:
    text = with_marker("x" * (MAX_BODY * 2), Marker(OP, {"sha": "s"}))
    assert len(text) <= MAX_BODY
    assert parse_marker(text) == Marker(OP, {"sha": "s"})
    assert "(truncated)" in text


def test_find_marked_returns_every_copy_in_order() -> None:
    marked = with_marker("hello", Marker(OP))
    items = [
        Item(5, marked),
        Item(1, "no marker"),
        Item(2, None),
        Item(3, with_marker("x", Marker(OpId("run-7f3a", "pr")))),
        Item(9, marked),
    ]
    assert [item.id for item in find_marked(items, OP)] == [5, 9]


def test_defanged_user_text_cannot_plant_a_marker() -> None:
    planted = "I agree! " + Marker(OP, {"sha": "evil"}).render()
    body = with_marker("Issue says:\n> " + defang(planted), Marker(OP, {"sha": "good"}))
    assert parse_markers(body) == [Marker(OP, {"sha": "good"})]


values = st.text(max_size=40)
keys = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)


@given(
    run=st.text(min_size=1, max_size=30),
    step=st.text(min_size=1, max_size=30),
    fields=st.dictionaries(keys, values, max_size=4),
    before=st.text(max_size=50),
    after=st.text(max_size=50),
)
def test_round_trip_with_any_values_and_surroundings(
    run: str, step: str, fields: dict[str, str], before: str, after: str
) -> None:
    marker = Marker(OpId(run, step), fields)
    text = defang(before) + marker.render() + defang(after)
    assert parse_markers(text) == [marker]


@given(fields=st.dictionaries(keys, values, max_size=4), hostile=values)
def test_a_value_cannot_forge_or_extend_the_marker(fields: dict[str, str], hostile: str) -> None:
    forged = f" --> <!-- repairbot:op=x:y sha={hostile} --> sha=evil "
    marker = Marker(OP, {**fields, "note": forged + hostile})
    assert parse_markers("prefix " + marker.render() + " suffix") == [marker]

"""Per-test outcomes: the JUnit report read as hostile input, and the comparison."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activities import test_outcomes
from activities.test_outcomes import REPORT_NAME, compare, parse_junit, read_report

JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_a" name="test_ok" time="0.1"/>
<testcase classname="tests.test_a" name="test_bad[1]" time="0.1">
<failure message="x">boom</failure></testcase>
<testcase classname="tests.test_b" name="test_err"><error message="y"/></testcase>
<testcase classname="tests.test_b" name="test_skip"><skipped/></testcase>
<testcase classname="tests.test_b" name="weird`name&lt;b&gt;"/>
</testsuite></testsuites>
"""


def test_outcomes_by_test_id() -> None:
    outcomes = parse_junit(JUNIT)
    assert outcomes is not None
    assert outcomes["tests.test_a::test_ok"] == "passed"
    assert outcomes["tests.test_a::test_bad[1]"] == "failed"
    assert outcomes["tests.test_b::test_err"] == "failed"
    assert outcomes["tests.test_b::test_skip"] == "skipped"
    # Names reach comments: no backticks or HTML survive.
    assert "tests.test_b::weird_name_b_" in outcomes


def test_a_dtd_is_refused_before_parsing() -> None:
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        b'<testsuite><testcase classname="c" name="&b;"/></testsuite>'
    )
    assert parse_junit(bomb) is None


def test_malformed_reports_give_nothing() -> None:
    assert parse_junit(b"<testsuite><testcase") is None
    assert parse_junit(b"\xff\xfe not xml") is None


def test_the_report_is_read_safely(tmp_path: Path) -> None:
    (tmp_path / REPORT_NAME).write_bytes(JUNIT)
    assert read_report(tmp_path) is not None
    # A symlink planted by the command (to a worker file) is not followed.
    secret = tmp_path / "secret.xml"
    secret.write_bytes(JUNIT)
    (tmp_path / REPORT_NAME).unlink()
    os.symlink(secret, tmp_path / REPORT_NAME)
    assert read_report(tmp_path) is None
    # A FIFO does not block the worker.
    (tmp_path / REPORT_NAME).unlink()
    os.mkfifo(tmp_path / REPORT_NAME)
    assert read_report(tmp_path) is None


def test_an_oversized_report_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / REPORT_NAME).write_bytes(JUNIT)
    monkeypatch.setattr(test_outcomes, "MAX_REPORT_BYTES", len(JUNIT) - 1)
    assert read_report(tmp_path) is None


BASE = {"t::ok": "passed", "t::env": "failed", "t::other": "passed"}


def test_a_test_failing_on_the_base_is_not_blamed() -> None:
    candidate = {"t::ok": "passed", "t::env": "failed", "t::other": "passed"}
    judged = compare(False, BASE, False, candidate)  # type: ignore[arg-type]
    assert judged.ok and judged.basis == "per-test"
    assert judged.still_failing == ["t::env"] and judged.regressions == []


def test_a_test_that_passed_on_the_base_and_fails_now_is_a_regression() -> None:
    candidate = {"t::ok": "failed", "t::env": "failed", "t::other": "passed"}
    judged = compare(False, BASE, False, candidate)  # type: ignore[arg-type]
    assert not judged.ok and judged.regressions == ["t::ok"]


def test_a_new_failing_test_is_a_regression() -> None:
    candidate = {**BASE, "t::new": "failed"}
    judged = compare(False, BASE, False, candidate)  # type: ignore[arg-type]
    assert not judged.ok and judged.regressions == ["t::new"]


def test_fixed_tests_are_noted() -> None:
    candidate = {**BASE, "t::env": "passed"}
    judged = compare(False, BASE, True, candidate)  # type: ignore[arg-type]
    assert judged.ok and judged.fixed == ["t::env"]


def test_a_suite_green_on_the_base_must_stay_green_whatever_the_report_says() -> None:
    judged = compare(True, BASE, False, {"t::ok": "passed"})  # type: ignore[arg-type]
    assert not judged.ok


def test_without_reports_exit_statuses_are_compared() -> None:
    assert compare(False, None, False, None).ok
    assert compare(False, None, False, None).basis == "exit-status"
    assert not compare(True, None, False, None).ok
    assert compare(True, BASE, True, None).ok  # type: ignore[arg-type]
    assert not compare(True, BASE, False, None).ok  # type: ignore[arg-type]


UNITTEST_V = """test_add (test_calc.CalcTest.test_add) ... FAIL
test_mul (test_calc.CalcTest.test_mul) ... ok
test_old (pkg.tests.OldStyle) ... ERROR
test_skip (test_calc.CalcTest.test_skip) ... skipped 'not today'

======================================================================
FAIL: test_add (test_calc.CalcTest.test_add)
----------------------------------------------------------------------
Ran 4 tests in 0.001s

FAILED (failures=1, errors=1, skipped=1)
"""


def test_unittest_verbose_output_gives_outcomes() -> None:
    outcomes = test_outcomes.parse_unittest(UNITTEST_V)
    assert outcomes == {
        "test_calc.CalcTest::test_add": "failed",
        "test_calc.CalcTest::test_mul": "passed",
        "pkg.tests.OldStyle::test_old": "failed",
        "test_calc.CalcTest::test_skip": "skipped",
    }


def test_a_partial_unittest_list_is_no_list() -> None:
    """A test the lines miss (a docstring, output cut) could hide a regression."""
    with_docstring = UNITTEST_V.replace(
        "Ran 4 tests", "test_doc (m.C.test_doc)\nA docstring. ... FAIL\nRan 5 tests"
    )
    assert test_outcomes.parse_unittest(with_docstring) is None


def test_output_that_is_not_unittests_gives_nothing() -> None:
    # Lines that look like unittest's, without its summary: a program printing them.
    assert test_outcomes.parse_unittest("test_x (a.B.test_x) ... ok\n") is None
    assert test_outcomes.parse_unittest("Ran 0 tests in 0.000s\n\nNO TESTS RAN\n") is None

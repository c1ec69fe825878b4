"""Per-test outcomes of a test command, and what a candidate changes about them.

pytest writes a JUnit XML report when asked through ``PYTEST_ADDOPTS`` (so the
maintainer's command is not rewritten). The report is written by repository
code and, for a candidate, by code the model wrote: it is hostile input.
It is read without following symlinks, as a regular file, capped in size,
refused if it declares a DTD (no entity expansion) and parsed with the
standard library's expat. When there is no usable report the comparison
falls back to exit statuses and says so.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Literal

from app.checkout import UnsafePath, read_in_checkout
from app.contracts.repo_commands import Comparison

Outcome = Literal["passed", "failed", "skipped"]
#: The report's name in the workspace's temporary directory.
REPORT_NAME = "repairbot-junit.xml"
MAX_REPORT_BYTES = 16 * 1024 * 1024
#: A suite larger than this is compared by exit status only.
MAX_TESTS = 50_000
_UNSAFE = re.compile(r"[^\w.:/\[\]\-, =]")


def report_options(tmpdir: Path) -> dict[str, str]:
    """Environment that makes any pytest the command runs write the report."""
    return {"PYTEST_ADDOPTS": f"--junitxml={tmpdir / REPORT_NAME}"}


def read_report(tmpdir: Path) -> dict[str, Outcome] | None:
    """Outcomes by test id from the report in ``tmpdir``; None when there is
    no usable report (absent, a symlink, too big, malformed, a DTD)."""
    try:
        data = read_in_checkout(tmpdir, REPORT_NAME, limit=MAX_REPORT_BYTES + 1)
    except (FileNotFoundError, UnsafePath, OSError):
        return None
    if len(data) > MAX_REPORT_BYTES:
        return None
    return parse_junit(data)


def parse_junit(data: bytes) -> dict[str, Outcome] | None:
    if b"<!DOCTYPE" in data.upper() or b"<!ENTITY" in data.upper():
        return None
    try:
        root = ET.fromstring(data)  # noqa: S314 (no DTD, size-capped)
    except ET.ParseError:
        return None
    outcomes: dict[str, Outcome] = {}
    for case in root.iter("testcase"):
        name = case.get("name")
        if not name:
            continue
        # Names are shown in comments: no markdown or HTML can ride on them.
        test_id = _UNSAFE.sub("_", f"{case.get('classname') or ''}::{name}")[:300]
        outcome = _outcome(case)
        if outcomes.get(test_id) != "failed":  # a repeated id counts as failed if any failed
            outcomes[test_id] = outcome
        if len(outcomes) > MAX_TESTS:
            return None
    return outcomes


#: ``unittest -v``: ``test_add (pkg.test_calc.CalcTest.test_add) ... FAIL``
#: (Python 3.11+; before, the parenthesis held only the class).
_UNITTEST_LINE = re.compile(
    r"^(?P<name>\w+) \((?P<where>[\w.]+)\)(?: \S.*)? \.\.\. "
    r"(?P<result>ok|FAIL|ERROR|skipped|expected failure|unexpected success)\b",
    re.MULTILINE,
)
_UNITTEST_SUMMARY = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_UNITTEST_OUTCOMES: dict[str, Outcome] = {
    "ok": "passed",
    "expected failure": "passed",
    "skipped": "skipped",
    "FAIL": "failed",
    "ERROR": "failed",
    "unexpected success": "failed",
}


def parse_unittest(output: str) -> dict[str, Outcome] | None:
    """Outcomes from ``python -m unittest -v`` output; None unless the output
    is unittest's and accounts for every test its summary counts ("Ran N
    tests"): a test missed (output cut in the middle, a docstring line) could
    hide a regression, so a partial list is no list."""
    summary = _UNITTEST_SUMMARY.search(output)
    if summary is None:
        return None
    outcomes: dict[str, Outcome] = {}
    for match in _UNITTEST_LINE.finditer(output):
        where, name = match.group("where"), match.group("name")
        if where.endswith(f".{name}"):
            where = where[: -len(name) - 1]
        test_id = _UNSAFE.sub("_", f"{where}::{name}")[:300]
        outcome = _UNITTEST_OUTCOMES[match.group("result")]
        if outcomes.get(test_id) != "failed":
            outcomes[test_id] = outcome
        if len(outcomes) > MAX_TESTS:
            return None
    if not outcomes or len(outcomes) != int(summary.group(1)):
        return None
    return outcomes


def _outcome(case: ET.Element) -> Outcome:
    tags = {child.tag for child in case}
    if tags & {"failure", "error"}:
        return "failed"
    if "skipped" in tags:
        return "skipped"
    return "passed"


def encode(outcomes: dict[str, Outcome]) -> bytes:
    return json.dumps(outcomes, sort_keys=True).encode()


def decode(data: bytes) -> dict[str, Outcome] | None:
    try:
        raw = json.loads(data)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    return {str(k): v for k, v in raw.items() if v in ("passed", "failed", "skipped")}


def compare(
    base_passed: bool,
    base: dict[str, Outcome] | None,
    candidate_passed: bool,
    candidate: dict[str, Outcome] | None,
) -> Comparison:
    """Judge the candidate by what it changes.

    A suite that passes with the candidate is fine. One that passed on the
    base and fails now is not, whatever the report says. When both fail,
    per-test outcomes decide: only tests failing now that did not fail on the
    base are blamed; without reports the failure is not blamed on the fix
    (the base failed the same way) and the basis says so.
    """
    basis: Literal["per-test", "exit-status"] = (
        "per-test" if base is not None and candidate is not None else "exit-status"
    )
    if base is None or candidate is None:
        return Comparison(
            ok=candidate_passed or not base_passed, candidate_passed=candidate_passed, basis=basis
        )
    failing_now = sorted(t for t, o in candidate.items() if o == "failed")
    regressions = [t for t in failing_now if base.get(t) != "failed"]
    still = [t for t in failing_now if base.get(t) == "failed"]
    fixed = sorted(t for t, o in base.items() if o == "failed" and candidate.get(t) == "passed")
    unexplained = not candidate_passed and base_passed  # fails now, no test to blame
    return Comparison(
        ok=candidate_passed or (not regressions and not unexplained),
        candidate_passed=candidate_passed,
        basis=basis,
        regressions=regressions,
        still_failing=still,
        fixed=fixed,
    )

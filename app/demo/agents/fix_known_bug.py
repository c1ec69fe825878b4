#!/usr/bin/env python3
"""A real command agent that applies a fix it is told about.

repairbot's command back end runs any CLI agent in the workspace; this one
stands in for a coding model in tests and the demo. It speaks the same
protocol a real agent would: it reads the request files repairbot names in
its environment, edits files in the current directory (the checkout), and
writes a result file. repairbot takes the diff it leaves as the proposal.

The fix is given as a replacement of text in a file::

    fix_known_bug.py --path calc.py --old "a - b" --new "a + b"
    fix_known_bug.py --spec fix.json      # [{"path": ..., "old": ..., "new": ...}]
    REPAIRBOT_FIX_SPEC='[...]' fix_known_bug.py

``--wrong-first TEXT`` makes the first attempt (one without feedback) apply
TEXT instead of the real fix, to exercise the verify -> feedback -> retry loop.
``--on-review PATH OLD NEW`` makes one more replacement, only when the
feedback holds a review (a maintainer asked for changes), to exercise the
review -> new attempt -> updated branch loop. ``--sleep SECONDS`` waits
before working, like a slow model, so a run can be cancelled mid-agent.
Exit status 1 when the text to replace is not in the file: an agent that
cannot do its job says so.

Standard library only: it runs under whatever Python the workspace has.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", help="file to edit, relative to the checkout")
    parser.add_argument("--old", help="text to replace (first occurrence)")
    parser.add_argument("--new", help="replacement text")
    parser.add_argument("--spec", type=Path, help="JSON file with a list of fixes")
    parser.add_argument("--wrong-first", help="replacement used on a first attempt")
    parser.add_argument(
        "--on-review",
        nargs=3,
        metavar=("PATH", "OLD", "NEW"),
        help="a further replacement made only when the feedback holds a review",
    )
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to wait first")
    return parser.parse_args(argv)


def _fixes(args: argparse.Namespace) -> list[dict[str, str]]:
    if args.path is not None:
        if args.old is None or args.new is None:
            sys.exit("fix_known_bug: --path needs --old and --new")
        return [{"path": args.path, "old": args.old, "new": args.new}]
    raw = args.spec.read_text() if args.spec else os.environ.get("REPAIRBOT_FIX_SPEC", "")
    if not raw:
        sys.exit("fix_known_bug: give --path/--old/--new, --spec or REPAIRBOT_FIX_SPEC")
    data = json.loads(raw)
    return data if isinstance(data, list) else [data]


def _has_review(feedback: str) -> bool:
    # repairbot's feedback file has one "## <kind>" section per item.
    return any(line.strip() == "## review" for line in feedback.splitlines())


def _read(name: str) -> str:
    path = os.environ.get(name)
    return Path(path).read_text() if path else ""


def main(argv: list[str]) -> int:
    args = _parse(argv)
    fixes = _fixes(args)
    if args.sleep > 0:
        print(f"thinking for {args.sleep:g}s", flush=True)
        time.sleep(args.sleep)
    issue = _read("REPAIRBOT_ISSUE_FILE")
    failure = _read("REPAIRBOT_REPRO_OUTPUT_FILE")
    feedback = _read("REPAIRBOT_FEEDBACK_FILE").strip()
    attempt = int(os.environ.get("REPAIRBOT_ATTEMPT", "1"))
    title = issue.splitlines()[0].lstrip("# ") if issue else "(no issue file)"
    print(f"attempt {attempt}: {title}")
    print(f"reproduction output: {len(failure)} characters; feedback: {len(feedback)} characters")

    careless = args.wrong_first is not None and attempt == 1 and not feedback
    replacements = [(fix, args.wrong_first if careless else fix["new"]) for fix in fixes]
    if args.on_review is not None and _has_review(feedback):
        path, old, new = args.on_review
        replacements.append(({"path": path, "old": old, "new": new}, new))
    changed = []
    for fix, replacement in replacements:
        target = Path(fix["path"])
        text = target.read_text()
        if fix["old"] not in text:
            if fix["new"] in text:
                print(f"{target}: already fixed")
                continue
            print(f"{target}: cannot find {fix['old']!r}", file=sys.stderr)
            return 1
        target.write_text(text.replace(fix["old"], replacement, 1))
        changed.append(str(target))
        print(f"{target}: replaced {fix['old']!r} with {replacement!r}")

    summary = f"Replaced the faulty expression in {', '.join(changed) or 'no file'}."
    if feedback:
        summary += " Took the feedback on the previous attempt into account."
    result_file = os.environ.get("REPAIRBOT_RESULT_FILE")
    if result_file:
        report = {"summary": summary, "input_tokens": 0, "output_tokens": 0}
        Path(result_file).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Run one case in this process and print its result for the orchestrator:
``python -m bench.case '<case json>'``.

One process per case keeps DBOS's process-wide singleton, the runtime's
module-level state and the allocator's high-water mark from leaking from one
case into the next.
"""

from __future__ import annotations

import asyncio
import sys
import traceback

from bench.environment import revision
from bench.spec import DBOS, RESULT_MARKER, Case, CaseResult


def run_one(case: Case) -> CaseResult:
    try:
        if case.system == DBOS:
            from bench import transact  # imported only here: DBOS is heavy and global

            return transact.run(case)
        from bench import ours

        return ours.run(case)
    # Reported as a row, so one broken case does not hide the rest. A stray
    # CancelledError (a BaseException) from a library's shutdown counts too.
    except (Exception, asyncio.CancelledError) as exc:
        traceback.print_exc()
        return CaseResult(case, error=f"{type(exc).__name__}: {exc}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.case '<case json>'", file=sys.stderr)
        return 2
    # Read first: the engine may change under a long benchmark (other people
    # commit), and the orchestrator flags cases that ran different code.
    code = revision()
    result = run_one(Case.from_json(argv[0]))
    result.notes["revision"] = code
    print(RESULT_MARKER + result.to_json(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

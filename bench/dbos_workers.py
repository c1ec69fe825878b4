"""DBOS Transact's side of the throughput benchmark: executor processes that
take bench.transact's N-step workflow from a DBOS queue, and the client that
enqueues into it.

    python -m bench.dbos_workers --database URL [--concurrency 8] [--poll 0.01]

Each process launches DBOS on the same system database and registers the
queue with ``worker_concurrency`` set to the concurrency our workers get, so
W processes run at most W x concurrency workflows at once, as ours do.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from dbos import DBOS, DBOSClient, EnqueueOptions

from bench import transact
from bench.environment import ROOT

QUEUE = "bench-throughput"
#: DBOS registers a workflow under its function's qualified name.
WORKFLOW_NAME = transact.steps.__qualname__


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.dbos_workers")
    parser.add_argument("--database", required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--poll", type=float, default=0.01, help="queue polling interval, s")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> int:
    DBOS(config=transact._config(args.database))
    try:
        DBOS.launch()
        await DBOS.register_queue_async(
            QUEUE,
            worker_concurrency=args.concurrency,
            polling_interval_sec=args.poll,
            on_conflict="always_update",
        )
        print("ready", flush=True)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        await stopping.wait()
    finally:
        DBOS.destroy()
    return 0


def start(database_url: str, concurrency: int, poll: float, log: Path) -> subprocess.Popen[str]:
    """One executor process; it prints ``ready`` once its queue is registered."""
    argv = [sys.executable, "-m", "bench.dbos_workers", "--database", database_url]
    argv += ["--concurrency", str(concurrency), "--poll", str(poll)]
    with log.open("ab") as err:
        return subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True
        )


def enqueue(client: DBOSClient, workflow_ids: Sequence[str], steps: int) -> None:
    for workflow_id in workflow_ids:
        options: EnqueueOptions = {
            "queue_name": QUEUE,
            "workflow_name": WORKFLOW_NAME,
            "workflow_id": workflow_id,
        }
        client.enqueue(options, steps)


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())

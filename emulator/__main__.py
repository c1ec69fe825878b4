"""``python -m emulator --port 8000 --webhook-url URL --webhook-secret S``: a real server."""

from __future__ import annotations

import argparse
import socket
from datetime import timedelta
from pathlib import Path

import uvicorn

from emulator.app import Emulator


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m emulator", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--base-path", default="", help='REST prefix, e.g. "/api/v3"')
    parser.add_argument("--root", type=Path, help="where bare repositories live (default: temp)")
    parser.add_argument("--public-url", help="origin for URLs in webhook payloads")
    parser.add_argument("--webhook-url", help="default webhook URL for apps registered without one")
    parser.add_argument("--webhook-secret", help="default webhook secret")
    parser.add_argument(
        "--token-ttl", type=int, default=3600, help="installation token lifetime, s"
    )
    parser.add_argument(
        "--log-level", default="info", help="uvicorn's (warning: no line per request)"
    )
    parser.add_argument(
        "--keep-alive",
        type=int,
        default=75,
        help="seconds an idle connection stays open (longer than clients keep theirs)",
    )
    parser.add_argument(
        "--fd",
        type=int,
        help="serve on this inherited listening socket (its port is --port), so a "
        "parent that chose the port never has to free it for us",
    )
    args = parser.parse_args(argv)

    with Emulator(
        root=args.root,
        base_path=args.base_path,
        public_url=args.public_url or f"http://{args.host}:{args.port}",
        webhook_url=args.webhook_url,
        webhook_secret=args.webhook_secret,
        token_ttl=timedelta(seconds=args.token_ttl),
    ) as emu:
        config = uvicorn.Config(
            emu.asgi(),
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=args.log_level in ("debug", "info"),
            timeout_keep_alive=args.keep_alive,
        )
        server = uvicorn.Server(config)
        if args.fd is None:
            server.run()
        else:
            server.run(sockets=[socket.socket(fileno=args.fd)])


if __name__ == "__main__":
    main()

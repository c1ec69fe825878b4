"""``repairbot dev``: everything on one machine (``serve``), plus the
webhook-proxy client when GitHub cannot reach this machine."""

from __future__ import annotations

import logging

import httpx

from app.config import Settings
from app.intake.proxy import WebhookProxy
from app.main.web_process import run_web
from app.main.worker_process import background

log = logging.getLogger("repairbot.dev")


def local_base(host: str, port: int) -> str:
    """This server's URL as this machine reaches it."""
    reach = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host  # noqa: S104 (a comparison)
    if ":" in reach:
        reach = f"[{reach}]"
    return f"http://{reach}:{port}"


async def run_dev(settings: Settings, *, host: str, port: int, proxy_url: str) -> int:
    async with httpx.AsyncClient() as client:
        proxy = None
        if proxy_url:
            base = local_base(host, port)
            proxy = WebhookProxy(
                proxy_url,
                f"{base}/webhooks/github",
                client,
                max_event_bytes=settings.webhook_max_bytes,
                ready_url=f"{base}/healthz",
            )
        else:
            log.info("no webhook proxy: deliveries must reach this machine directly")
        async with background("webhook-proxy", proxy.run_forever() if proxy else None):
            return await run_web(settings, host=host, port=port, with_worker=True)

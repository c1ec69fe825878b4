"""Webhook handlers, one module per event family, combined into one router."""

from __future__ import annotations

from app.webhooks.routing import HandlerContext, Router
from handlers import (
    config_check,
    installation,
    issue_comment,
    issues,
    pull_request,
    pull_request_review,
    repository,
)


def build_router() -> Router:
    return Router(
        config_check.router,
        installation.router,
        issues.router,
        issue_comment.router,
        pull_request.router,
        pull_request_review.router,
        repository.router,
    )


__all__ = ["HandlerContext", "Router", "build_router"]

"""Glue between git smart HTTP (``emulator.smart_http``) and the emulator's world.

Git authenticates like GitHub: Basic credentials whose password is an
installation token (user ``x-access-token``) or a user token. Reading needs
``contents: read`` (or read access), pushing ``contents: write`` (or write
access). Moved refs are announced through :func:`emulator.gitview.refs_updated`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from emulator.auth import AuthError, Principal, can_see, may, token_principal
from emulator.git import ZERO_SHA, RefUpdate
from emulator.gitview import RefChange, refs_updated
from emulator.smart_http import GitAuthError, GitSmartHTTP

if TYPE_CHECKING:
    from emulator.app import Emulator


def git_app(emu: Emulator) -> GitSmartHTTP:
    def resolve_repo(owner: str, name: str) -> Path | None:
        with emu.store.lock:
            repo = emu.store.repo(owner, name)
            return None if repo is None else repo.path

    def authorize(
        owner: str, name: str, username: str | None, password: str | None, write: bool
    ) -> Principal:
        with emu.store.lock:
            repo = emu.store.repo(owner, name)
            if repo is None or emu.store.arriving(repo):
                raise GitAuthError(404)
            if not password:
                if write or repo.private:
                    raise GitAuthError(401)
                return Principal("anonymous")
            try:
                principal = token_principal(emu.store, password)
            except AuthError:
                raise GitAuthError(401) from None
            if not can_see(emu.store, principal, repo):
                raise GitAuthError(404)
            level, role = ("write", "write") if write else ("read", "read")
            if not may(principal, repo, permission="contents", level=level, role=role):
                raise GitAuthError(403)
            return principal

    def on_refs_updated(owner: str, name: str, principal: object, updates: list[RefUpdate]) -> None:
        with emu.store.lock:
            repo = emu.store.repo(owner, name)
            if repo is None or not isinstance(principal, Principal):
                return
            if principal.user is not None:
                sender = principal.user
            elif principal.app is not None:
                sender = emu.bot_user(principal.app)
            else:
                return
            changes = [
                RefChange(
                    u.ref,
                    None if u.old_sha == ZERO_SHA else u.old_sha,
                    None if u.new_sha == ZERO_SHA else u.new_sha,
                )
                for u in updates
            ]
            refs_updated(emu, repo, sender, changes)

    def resolve_moved(owner: str, name: str) -> str | None:
        from emulator.moves import moved_repo

        with emu.store.lock:
            repo = moved_repo(emu, owner, name)
            return None if repo is None else repo.full_name

    return GitSmartHTTP(
        resolve_repo=resolve_repo,
        resolve_moved=resolve_moved,
        authorize=authorize,
        on_refs_updated=on_refs_updated,
        faults=emu.faults,
    )

"""What owners do to whole repositories, issues and installations, with the
webhooks GitHub sends for each: rename and transfer a repository (the old
name keeps answering with redirects, the id stays), delete or transfer an
issue, suspend and unsuspend an installation.

Called under the store lock (REST endpoints and the control API).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from emulator.render import base
from emulator.render import issues as render_issues
from emulator.render import repos as render_repos
from emulator.rest.http import ApiError
from emulator.state import Installation, Issue, Repo, User

if TYPE_CHECKING:
    from emulator.app import Emulator


def _rekey(emu: Emulator, repo: Repo, owner: User, name: str) -> str:
    """Give ``repo`` its new full name; the old one now redirects. The old name."""
    store = emu.store
    old = repo.full_name
    if store.repo(owner.login, name) is not None and store.repo(owner.login, name) is not repo:
        raise ApiError(
            422,
            "Repository creation failed.",
            errors=[{"message": "name already exists on this account"}],
        )
    del store.repos[old.lower()]
    repo.owner, repo.name, repo.updated_at = owner, name, store.now()
    store.repos[repo.full_name.lower()] = repo
    store.moved[old.lower()] = repo.id
    store.moved.pop(repo.full_name.lower(), None)
    return old


def rename_repo(emu: Emulator, repo: Repo, name: str, sender: User) -> None:
    old_name = repo.name
    if name == old_name:
        return
    _rekey(emu, repo, repo.owner, name)
    emu.events.for_repo(
        repo,
        "repository",
        {"action": "renamed", "changes": {"repository": {"name": {"from": old_name}}}},
        sender=sender,
    )


def transfer_repo(emu: Emulator, repo: Repo, new_owner: User, sender: User) -> None:
    old_owner = repo.owner
    _rekey(emu, repo, new_owner, repo.name)
    repo.collaborators.pop(new_owner.login.lower(), None)
    kind = "organization" if old_owner.type == "Organization" else "user"
    urls = emu.webhook_urls()
    emu.events.for_repo(
        repo,
        "repository",
        {
            "action": "transferred",
            "changes": {"owner": {"from": {kind: base.user(urls, old_owner)}}},
        },
        sender=sender,
    )


def moved_repo(emu: Emulator, owner: str, name: str) -> Repo | None:
    """The repository that was called ``owner/name`` before a rename or transfer."""
    repo_id = emu.store.moved.get(f"{owner}/{name}".lower())
    if repo_id is None:
        return None
    return next((r for r in emu.store.repos.values() if r.id == repo_id), None)


def delete_issue(emu: Emulator, repo: Repo, issue: Issue, sender: User) -> None:
    """GitHub's ``deleteIssue`` (GraphQL; admins only): gone, comments and all."""
    body = {
        "action": "deleted",
        "issue": render_issues.issue(emu.webhook_urls(), emu.store, repo, issue),
    }
    del repo.issues[issue.number]
    for comment_id in [c.id for c in repo.comments.values() if c.issue_number == issue.number]:
        del repo.comments[comment_id]
    emu.events.for_repo(repo, "issues", body, sender=sender)


def transfer_issue(emu: Emulator, repo: Repo, issue: Issue, target: Repo, sender: User) -> Issue:
    """GitHub's ``transferIssue``: the issue, its comments and its labels that
    exist there move to ``target`` under a new number; the old number
    redirects. ``issues.transferred`` goes out from the old repository."""
    store, now = emu.store, emu.store.now()
    urls = emu.webhook_urls()
    before = render_issues.issue(urls, store, repo, issue)
    moved = Issue(
        id=issue.id,
        number=target.next_number,
        title=issue.title,
        body=issue.body,
        user=issue.user,
        created_at=issue.created_at,
        updated_at=now,
        labels=[name for name in issue.labels if name.lower() in target.labels],
    )
    target.next_number += 1
    target.issues[moved.number] = moved
    for comment in [c for c in repo.comments.values() if c.issue_number == issue.number]:
        comment.issue_number = moved.number
        del repo.comments[comment.id]
        target.comments[comment.id] = comment
    del repo.issues[issue.number]
    repo.transferred_issues[issue.number] = (target.id, moved.number)
    changes = {
        "new_issue": render_issues.issue(urls, store, target, moved),
        "new_repository": render_repos.repository(urls, target),
    }
    emu.events.for_repo(
        repo,
        "issues",
        {"action": "transferred", "issue": before, "changes": changes},
        sender=sender,
    )
    return moved


def set_suspended(emu: Emulator, inst: Installation, suspended: bool, sender: User) -> None:
    """Suspend (its tokens stop working: 403) or unsuspend an installation;
    the app hears of both."""
    store = emu.store
    if (inst.suspended_at is not None) == suspended:
        return
    inst.suspended_at = store.now() if suspended else None
    inst.suspended_by = sender if suspended else None
    inst.updated_at = store.now()
    body: dict[str, Any] = {
        "action": "suspend" if suspended else "unsuspend",
        "installation": base.installation(emu.webhook_urls(), inst, store.apps[inst.app_id]),
    }
    emu.events.for_installation(inst, "installation", body, sender=sender)

"""Onboarding activities: look at a newly installed repository, and make sure
its trigger label exists.

The proposal itself (commit, branch, pull request) goes through the same
conditional, marker-reconciled GitHub activities a repair uses
(``github.build_commit``, ``github.push_branch``, ``github.pull_request``):
this module only decides what to propose.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from githubkit.exception import GitHubException, RequestFailed

from activities.github import GitHubAccess
from app.contracts import onboarding
from app.contracts.onboarding import InspectInput, InspectResult, LabelInput, LabelResult
from app.engine import (
    Absent,
    ActivityContext,
    Found,
    PermanentError,
    ReconcileResult,
    TransientError,
    implements,
)
from app.evidence import EvidenceStore
from app.github.errors import classified, classify, github_message, status_of
from app.github.gitcmd import fetch_commit, git_env, init_bare, run_git
from app.github.pulls import find_pull_requests
from app.github.repos import RepoRef
from app.onboarding.detect import (
    CANDIDATE_DIRS,
    CANDIDATE_FILES,
    MAX_CANDIDATE_BYTES,
    detect,
    render_config,
)
from app.onboarding.proposal import ONBOARDING_BRANCH, new_file_patch, onboarding_op
from app.repo_config import CONFIG_PATH


async def _read_root(
    remote_url: str, sha: str, token: str, into: Path
) -> tuple[dict[str, str], frozenset[str], bool]:
    """The candidate files at the root of ``sha`` (name -> text), the
    candidate directories present, and whether the config file exists.

    Read as git objects from a bare repository: nothing is checked out, so
    a hostile tree (symlinks, huge files, odd names) cannot touch the disk;
    each blob is sized before it is read.
    """
    bare = into / "objects.git"
    env = git_env(extra={"GIT_DIR": str(bare)})
    init_bare(bare)
    fetched = await fetch_commit(bare, remote_url, sha, token=token)
    if fetched.status == "unreachable":
        raise TransientError(f"cannot fetch {sha}: {fetched.detail}")
    if fetched.status == "missing":
        raise PermanentError(f"cannot fetch {sha}: {fetched.detail}")
    listing = await run_git(["ls-tree", "-z", "-l", sha], cwd=bare, env=env)
    if not listing.ok:
        raise PermanentError(f"cannot list {sha}: {listing.stderr.strip()}")
    blobs: dict[str, tuple[str, int]] = {}
    dirs: set[str] = set()
    for entry in listing.stdout.split("\0"):
        meta, _, name = entry.partition("\t")
        parts = meta.split()
        if len(parts) != 4:
            continue
        mode, kind, object_sha, size_text = parts
        if kind == "tree" and name in CANDIDATE_DIRS:
            dirs.add(name)
        # Regular files only (100644/100755): a symlink's "content" is its target.
        if kind == "blob" and mode in ("100644", "100755") and name in CANDIDATE_FILES:
            blobs[name] = (object_sha, int(size_text))
    configured = (await run_git(["cat-file", "-e", f"{sha}:{CONFIG_PATH}"], cwd=bare, env=env)).ok
    files: dict[str, str] = {}
    for name, (object_sha, size) in blobs.items():
        if size > MAX_CANDIDATE_BYTES:
            continue
        blob = await run_git(["cat-file", "blob", object_sha], cwd=bare, env=env)
        if blob.ok:
            files[name] = blob.stdout
    return files, frozenset(dirs), configured


class OnboardingActivities:
    def __init__(self, access: GitHubAccess, evidence: EvidenceStore) -> None:
        self.access = access
        self.evidence = evidence

    @implements(onboarding.inspect_repository)
    async def inspect_repository(
        self, actx: ActivityContext, request: InspectInput
    ) -> InspectResult:
        """Whether the repository needs onboarding, and the config to propose."""
        access = self.access
        repo = RepoRef.parse(request.repo)
        gh = access.factory.for_installation(request.installation_id, repository=request.repo)
        with classified(mutation=False):
            info = (await gh.rest.repos.async_get(repo.owner, repo.name)).parsed_data
        if info.id != request.repository_id:
            raise PermanentError(
                f"{request.repo} is repository {info.id}, not {request.repository_id}: "
                "it was renamed or replaced since the installation event"
            )
        pulls = await find_pull_requests(
            gh,
            repo,
            ONBOARDING_BRANCH,
            onboarding_op(request.repository_id),
            bot_login=await access.factory.bot_login(),
        )
        if pulls:
            return InspectResult(state="proposed", pull_number=pulls[0].number)
        branch = info.default_branch
        with classified(mutation=False):
            try:
                ref = await gh.rest.git.async_get_ref(repo.owner, repo.name, f"heads/{branch}")
            except GitHubException as exc:
                if status_of(exc) in (404, 409):  # an empty repository has no branch yet
                    return InspectResult(state="empty", default_branch=branch)
                raise
        base_sha = ref.parsed_data.object_.sha
        token = await access.factory.installation_token(
            request.installation_id, repository=request.repo, permissions={"contents": "read"}
        )
        with tempfile.TemporaryDirectory(prefix="repairbot-onboard-") as tmp:
            files, dirs, configured = await _read_root(
                access.clone_url(request.repo), base_sha, token.token, Path(tmp)
            )
        if configured:
            return InspectResult(state="configured", default_branch=branch, base_sha=base_sha)
        found = detect(files, dirs)
        text = render_config(found, trigger_label=request.trigger_label)
        patch = self.evidence.put(
            new_file_patch(CONFIG_PATH, text), kind="patch", name="onboarding.patch"
        )
        return InspectResult(
            state="needs-config",
            default_branch=branch,
            base_sha=base_sha,
            patch_sha=patch.sha256,
            config_text=text,
            reasons=found.reasons,
        )

    async def _label_exists(self, actx: ActivityContext, request: LabelInput) -> ReconcileResult:
        """After a lost answer: the label is there (ours or a person's) or provably not."""
        repo = RepoRef.parse(request.repo)
        gh = self.access.factory.for_installation(request.installation_id, repository=request.repo)
        try:
            await gh.rest.issues.async_get_label(repo.owner, repo.name, request.name)
        except GitHubException as exc:
            if status_of(exc) == 404:
                return Absent()
            raise classify(exc, mutation=False) from exc
        return Found(LabelResult(created=True).model_dump())

    @implements(onboarding.ensure_label, reconcile=_label_exists)
    async def ensure_label(self, actx: ActivityContext, request: LabelInput) -> LabelResult:
        """The repository has the label (created if missing; an existing one is left as it is)."""
        repo = RepoRef.parse(request.repo)
        gh = self.access.factory.for_installation(request.installation_id, repository=request.repo)
        try:
            await gh.rest.issues.async_create_label(
                repo.owner,
                repo.name,
                name=request.name,
                color=request.color,
                description=request.description,
            )
        except GitHubException as exc:
            # 422 "already_exists": a person (or our own lost answer) made it first.
            # GitHub names the problem in ``errors[].code``; its message is generic.
            if (
                isinstance(exc, RequestFailed)
                and exc.response.status_code == 422
                and "already_exists" in github_message(exc).lower()
            ):
                return LabelResult(created=False)
            raise classify(exc, mutation=True) from exc
        return LabelResult(created=True)

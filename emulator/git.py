"""Bare git repositories for the emulator, driven through the real ``git`` CLI.

Every operation is one or a few ``git`` plumbing commands run with an argv list
and ``cwd=`` the repository: no shell, no ``os.chdir``, no worktree. Ref
updates are conditional (``git update-ref <ref> <new> <old>``), so a
concurrent push or merge is detected by git's own ref locking instead of a
lock of ours.

Git runs with an environment built from scratch (global and system config
ignored, identity passed explicitly), so neither the developer's
``~/.gitconfig`` nor ``GIT_*`` variables of the calling process can change
what a repository holds.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

ZERO_SHA = "0" * 40
#: Git's well-known empty tree; ``mktree`` writes it on demand.
EMPTY_TREE_SHA = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

MergeMethod = Literal["merge", "squash", "rebase"]
#: Answers that depend on commits alone, by (question, commit shas).
History = dict[tuple[str, ...], Any]
_T = TypeVar("_T")

_FULL_SHA = re.compile(r"[0-9a-f]{40}")
#: A loose ref file holding a sha: 40 hex digits and a newline.
_LOOSE_REF = re.compile(rb"([0-9a-f]{40})\n")
#: Characters and sequences that turn a name into revision syntax or are
#: forbidden in ref names (see git-check-ref-format(1)).
_UNSAFE_REV = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")
#: Seconds git waits for a held ref lock before failing the update.
_REF_LOCK_TIMEOUT_MS = 2000
_COMMAND_TIMEOUT = 120.0


# --------------------------------------------------------------------------- errors


class GitError(Exception):
    """A git command failed, or git state does not allow the operation."""

    def __init__(
        self,
        message: str,
        *,
        argv: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr


class ObjectNotFound(GitError):
    """A ref, commit or object named by the caller does not exist."""


class InvalidRefName(GitError):
    """The name is not a valid git ref name."""


class RefConflict(GitError):
    """A conditional ref update found the ref somewhere other than expected."""

    def __init__(self, ref: str, expected: str, actual: str) -> None:
        super().__init__(f"{ref} is at {actual}, expected {expected}")
        self.ref = ref
        self.expected = expected
        self.actual = actual


class NotFastForward(GitError):
    """A non-forced update would drop commits from the ref."""

    def __init__(self, ref: str, old_sha: str, new_sha: str) -> None:
        super().__init__(f"updating {ref} from {old_sha} to {new_sha} is not a fast forward")
        self.ref = ref
        self.old_sha = old_sha
        self.new_sha = new_sha


class MergeConflict(GitError):
    """The two commits do not merge cleanly (``paths`` lists the conflicted files)."""

    def __init__(self, message: str, paths: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.paths = tuple(paths)


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Identity:
    """Who authored or committed. ``date``: any date git accepts (ISO 8601 is best);
    ``None`` means now."""

    name: str
    email: str
    date: str | None = None


#: Author and committer of everything the emulator itself writes. The fixed date
#: makes seeded repositories identical (same shas) on every run.
EMULATOR_IDENTITY = Identity("Emulator", "emulator@example.invalid", "2024-01-01T00:00:00+00:00")


@dataclass(frozen=True)
class CommitInfo:
    """A commit as the REST API shows it. Dates are timezone-aware, in UTC."""

    sha: str
    tree: str
    parents: tuple[str, ...]
    author_name: str
    author_email: str
    author_date: datetime
    committer_name: str
    committer_email: str
    committer_date: datetime
    #: The message without its trailing newlines.
    message: str


@dataclass(frozen=True)
class RefUpdate:
    """One ref that moved. ``old_sha`` is ZERO_SHA for a creation, ``new_sha`` for a deletion."""

    ref: str
    old_sha: str
    new_sha: str

    @property
    def created(self) -> bool:
        return self.old_sha == ZERO_SHA

    @property
    def deleted(self) -> bool:
        return self.new_sha == ZERO_SHA


@dataclass(frozen=True)
class Comparison:
    """``base...head`` as GitHub's compare endpoint sees it."""

    base: str
    head: str
    merge_base: str | None
    ahead_by: int
    behind_by: int
    #: Commits in head but not in base, oldest first.
    commits: tuple[str, ...]

    @property
    def status(self) -> Literal["identical", "ahead", "behind", "diverged"]:
        if self.ahead_by and self.behind_by:
            return "diverged"
        if self.ahead_by:
            return "ahead"
        return "behind" if self.behind_by else "identical"


@dataclass(frozen=True)
class TreeEntry:
    path: str
    mode: str
    type: Literal["blob", "tree", "commit"]
    sha: str
    #: Blob size in bytes; None for trees and submodules.
    size: int | None


class _LogRecord(NamedTuple):
    info: CommitInfo
    #: The author date exactly as stored ("<epoch> <tz>"), to replay it unchanged.
    raw_author_date: str


# --------------------------------------------------------------------------- helpers


def qualify_ref(ref: str) -> str:
    """The full ref name: ``refs/...`` as is, ``heads/x`` and ``tags/x`` under ``refs/``,
    a bare name as a branch. Raises InvalidRefName for names git would refuse."""
    if ref.startswith("refs/"):
        full = ref
    elif ref.startswith(("heads/", "tags/")):
        full = f"refs/{ref}"
    else:
        full = f"refs/heads/{ref}"
    check_ref_name(full)
    return full


def check_ref_name(name: str) -> None:
    """Git's ref-name rules (git-check-ref-format), checked without a subprocess."""
    components = name.split("/")
    bad = (
        not name.startswith("refs/")
        or _UNSAFE_REV.search(name) is not None
        or name.endswith(("/", "."))
        or name == "@"
        # A leading "-" is legal for git but would read as an option (git refuses such branches).
        or any(not c or c.startswith((".", "-")) or c.endswith(".lock") for c in components)
    )
    if bad:
        raise InvalidRefName(f"invalid ref name: {name!r}")


def _normalise_expected(old_sha: str | None) -> str | None:
    """``None`` = no condition; ``""`` or zeros = must not exist (ZERO_SHA); else the sha."""
    if old_sha is None:
        return None
    return old_sha or ZERO_SHA


def _join_message(title: str, message: str) -> str:
    return f"{title}\n\n{message}" if message.strip() else title


def _identity_env(author: Identity, committer: Identity) -> dict[str, str]:
    env = {
        "GIT_AUTHOR_NAME": author.name,
        "GIT_AUTHOR_EMAIL": author.email,
        "GIT_COMMITTER_NAME": committer.name,
        "GIT_COMMITTER_EMAIL": committer.email,
    }
    if author.date is not None:
        env["GIT_AUTHOR_DATE"] = author.date
    if committer.date is not None:
        env["GIT_COMMITTER_DATE"] = committer.date
    return env


def git_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for git: only PATH/HOME/TMPDIR of ours, no user or system config."""
    env = {key: os.environ[key] for key in ("PATH", "HOME", "TMPDIR") if key in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(
        {
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
        }
    )
    if extra:
        env.update(extra)
    return env


_LOG_FORMAT = "%x00".join(["%H", "%T", "%P", "%an", "%ae", "%ad", "%cn", "%ce", "%cd", "%B"])
_LOG_FIELDS = 10


def _raw_date_to_utc(raw: str) -> datetime:
    """``"<epoch> <+hhmm>"`` (git's raw date) as an aware UTC datetime."""
    return datetime.fromtimestamp(int(raw.split()[0]), tz=UTC)


def _parse_log(output: bytes) -> list[_LogRecord]:
    """Records of ``git log -z --format=tformat:<_LOG_FORMAT> --date=raw``."""
    fields = output.decode("utf-8", errors="replace").split("\x00")
    if fields and fields[-1] == "":
        fields.pop()
    records = []
    for i in range(0, len(fields) - _LOG_FIELDS + 1, _LOG_FIELDS):
        sha, tree, parents, an, ae, ad, cn, ce, cd, body = fields[i : i + _LOG_FIELDS]
        info = CommitInfo(
            sha=sha,
            tree=tree,
            parents=tuple(parents.split()),
            author_name=an,
            author_email=ae,
            author_date=_raw_date_to_utc(ad),
            committer_name=cn,
            committer_email=ce,
            committer_date=_raw_date_to_utc(cd),
            message=body.rstrip("\n"),
        )
        records.append(_LogRecord(info, ad))
    return records


# --------------------------------------------------------------------------- the repository


class BareRepo:
    """A bare repository on disk. Stateless apart from its path, so safe to share
    between threads; concurrent writers are arbitrated by git's ref locks.

    ``history``, when given, remembers answers that depend on commits alone
    (a comparison, an ancestry, a commit, a merge's cleanness, that a sha is a
    commit): a commit's sha names its whole history, so such an answer never
    changes, while refs are read at every call (a loose ref file without a git
    process, see :meth:`_loose_ref`). Its owner (the emulator's repository) drops
    it with the repository, so a repository made again at the same path starts
    empty."""

    def __init__(self, path: Path, history: History | None = None) -> None:
        self.path = Path(path)
        self._history = history

    def __repr__(self) -> str:
        return f"BareRepo({str(self.path)!r})"

    # ------------------------------------------------------------------ creation

    @classmethod
    def create(
        cls, path: Path, *, source: Path | None = None, default_branch: str = "main"
    ) -> BareRepo:
        """Initialise a bare repository at ``path``; with ``source`` (a plain folder),
        commit its content as the first commit of ``default_branch``."""
        branch = default_branch.removeprefix("refs/heads/")
        branch_ref = qualify_ref(branch)
        path.parent.mkdir(parents=True, exist_ok=True)
        # No templates: sample hooks and description files are noise for a server repo.
        _run_git(
            ["init", "--quiet", "--bare", "--template=", f"--initial-branch={branch}", str(path)],
            cwd=path.parent,
        )
        repo = cls(path)
        if source is not None:
            tree = repo._tree_of_folder(source)
            commit = repo.commit_tree(
                tree,
                parents=(),
                message="Initial commit",
                author=EMULATOR_IDENTITY,
                committer=EMULATOR_IDENTITY,
            )
            repo.update_ref(branch_ref, commit, old_sha=ZERO_SHA)
        return repo

    @classmethod
    def fork(
        cls, path: Path, source: BareRepo, *, default_branch: str, all_branches: bool
    ) -> BareRepo:
        """A new bare repository at ``path`` holding ``source``'s default branch
        (with ``all_branches``: every branch and tag), as GitHub's fork does."""
        repo = cls.create(path, default_branch=default_branch)
        specs = (
            ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
            if all_branches
            else [f"+refs/heads/{default_branch}:refs/heads/{default_branch}"]
        )
        repo._git("fetch", "--quiet", "--no-tags", str(source.path), *specs)
        return repo

    def copy_commit(self, source: BareRepo, sha: str, ref: str) -> None:
        """Bring commit ``sha`` (and what it needs) from ``source`` and point ``ref``
        at it: how a fork's pull request head reaches the base repository."""
        if _is_unsafe_rev(sha) or not _FULL_SHA.fullmatch(sha):
            raise ObjectNotFound(f"not a commit sha: {sha!r}")
        name = qualify_ref(ref)
        # The source must serve a sha no ref of it names any more (a moved branch).
        upload_pack = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
        self._git(
            "fetch",
            "--quiet",
            "--no-tags",
            f"--upload-pack={upload_pack}",
            str(source.path),
            f"+{sha}:{name}",
        )

    def _tree_of_folder(self, source: Path) -> str:
        """Stage every file of ``source`` (honouring its .gitignore) in a throwaway index."""
        if not source.is_dir():
            raise GitError(f"source is not a directory: {source}")
        with tempfile.TemporaryDirectory(prefix="emulator-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            work_tree = str(source.resolve())
            self._git("--work-tree", work_tree, "add", "--all", "--", ".", cwd=source, env=env)
            return self._git("write-tree", env=env).stdout.decode().strip()

    # ------------------------------------------------------------------ running git

    def _git(
        self,
        *args: str,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        ok: Iterable[int] = (0,),
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        argv = [
            "--git-dir",
            str(self.path),
            "-c",
            "gc.auto=0",
            "-c",
            f"core.filesRefLockTimeout={_REF_LOCK_TIMEOUT_MS}",
            *args,
        ]
        return _run_git(argv, cwd=cwd or self.path, input=input, env=env, ok=ok)

    def _text(self, *args: str, input: bytes | None = None) -> str:
        return self._git(*args, input=input).stdout.decode("utf-8", errors="replace").strip()

    # ------------------------------------------------------------------ reading refs and objects

    def default_branch(self) -> str | None:
        """The branch HEAD points at (``main``), or None if HEAD is detached."""
        result = self._git("symbolic-ref", "--quiet", "--short", "HEAD", ok=(0, 1))
        return result.stdout.decode().strip() or None

    def resolve(self, ref: str) -> str | None:
        """The commit ``ref`` names: a branch or tag name, ``heads/x``, ``refs/heads/x``,
        ``HEAD``, or a (possibly abbreviated) sha. None if there is no such commit."""
        found = self._peel_commits([ref])
        return found[0]

    def resolve_all(self, refs: Sequence[str]) -> list[str | None]:
        """:meth:`resolve` for several names at once, in one git process."""
        return self._peel_commits(refs)

    def _peel_commits(self, revs: Sequence[str]) -> list[str | None]:
        """Resolve several names to commit shas: those :meth:`_known_commit` answers
        without git, the others in one ``cat-file --batch-check``."""
        results: list[str | None] = [None] * len(revs)
        queries = []
        for i, rev in enumerate(revs):
            if not rev or _is_unsafe_rev(rev):
                continue
            results[i] = self._known_commit(rev)
            if results[i] is None:
                queries.append((i, rev))
        if not queries:
            return results
        payload = "".join(f"{rev}^{{commit}}\n" for _, rev in queries).encode()
        out = self._text("cat-file", "--batch-check=%(objectname) %(objecttype)", input=payload)
        for (i, _), line in zip(queries, out.splitlines(), strict=True):
            sha, _, kind = line.rpartition(" ")
            if kind == "commit":
                results[i] = sha
                if self._history is not None:
                    self._history[("is-commit", sha)] = True
        return results

    def _known_commit(self, rev: str) -> str | None:
        """The commit ``rev`` names, when that is known without running git: a full
        sha, or a branch's loose ref file, whose sha was found to be a commit before
        (git never drops an object here: ``gc.auto=0``). None: ask git."""
        if self._history is None:
            return None
        sha = rev if _FULL_SHA.fullmatch(rev) else None
        if sha is None and rev.startswith("refs/heads/"):
            sha = self._loose_ref(rev)
        return sha if sha is not None and ("is-commit", sha) in self._history else None

    def _loose_ref(self, name: str) -> str | None:
        """The sha in the loose ref file of ``name`` (a full ``refs/`` name), read as
        git reads it, without a git process: a loose ref file is the files backend's
        record of that ref (it wins over ``packed-refs``), and git replaces it whole
        by a rename, so a read sees the old value or the new one. None where git
        must answer: no loose file (a packed ref, or no ref), a symbolic ref, or
        anything but one sha in it."""
        try:
            check_ref_name(name)
            with open(self.path / name, "rb") as ref_file:
                # One byte more than a sha and its newline: a longer file never matches.
                content = ref_file.read(42)
        except (InvalidRefName, OSError):
            return None
        found = _LOOSE_REF.fullmatch(content)
        return found[1].decode("ascii") if found else None

    def _require_commits(self, *revs: str) -> list[str]:
        shas = self._peel_commits(revs)
        missing = [rev for rev, sha in zip(revs, shas, strict=True) if sha is None]
        if missing:
            raise ObjectNotFound(f"no such commit: {', '.join(missing)}")
        return [sha for sha in shas if sha is not None]

    def list_refs(self, prefix: str = "refs/") -> dict[str, str]:
        """Full ref name -> sha (the tag object's sha for annotated tags), for refs
        starting with ``prefix`` (a plain string prefix, as GitHub's matching-refs)."""
        out = self._text("for-each-ref", "--format=%(objectname) %(refname)")
        refs = {}
        for line in out.splitlines():
            sha, _, name = line.partition(" ")
            if name.startswith(prefix):
                refs[name] = sha
        return refs

    def ref_sha(self, ref: str) -> str | None:
        """Where exactly this ref (qualified with :func:`qualify_ref`) points, or None."""
        name = qualify_ref(ref)
        loose = self._loose_ref(name)
        if loose is not None:
            return loose
        out = self._text("for-each-ref", "--format=%(objectname) %(refname)", name)
        for line in out.splitlines():
            sha, _, found = line.partition(" ")
            if found == name:
                return sha
        return None

    def commit_info(self, sha: str) -> CommitInfo:
        return self._about_commits("commit", (sha,), self._commit_info)

    def _commit_info(self, commit: str) -> CommitInfo:
        return self._log("--no-walk", commit)[0].info

    def _about_commits(self, question: str, revs: tuple[str, ...], answer: Callable[..., _T]) -> _T:
        """``answer`` of the commits ``revs`` name (an error if one names none),
        remembered in ``history`` by their shas: asked again with those shas,
        no git runs (the commits were found before, and git never drops them)."""
        if self._history is not None and (question, *revs) in self._history:
            remembered: _T = self._history[(question, *revs)]
            return remembered
        shas = self._require_commits(*revs)
        value = answer(*shas)
        if self._history is not None:
            self._history[(question, *shas)] = value
        return value

    def _log(self, *args: str) -> list[_LogRecord]:
        out = self._git("log", "-z", "--date=raw", f"--format=tformat:{_LOG_FORMAT}", *args, "--")
        return _parse_log(out.stdout)

    def read_file(self, sha: str, path: str) -> bytes | None:
        """The content of the blob at ``path`` in commit (or tree) ``sha``; None if the
        path does not exist or is not a file."""
        path = path.strip("/")
        if not path or "\n" in path or _is_unsafe_rev(sha):
            return None
        out = self._git("cat-file", "--batch", input=f"{sha}:{path}\n".encode()).stdout
        header, _, rest = out.partition(b"\n")
        fields = header.split(b" ")
        if len(fields) != 3 or fields[1] != b"blob":
            return None
        return rest[: int(fields[2])]

    def blob_sha(self, sha: str, path: str) -> str:
        """The blob id of the file at ``path`` in commit ``sha`` (it exists)."""
        return self._text("rev-parse", f"{sha}:{path.strip('/')}").strip()

    def list_tree(self, sha: str, path: str = "") -> list[TreeEntry] | None:
        """The entries of directory ``path`` in commit ``sha``; None if it is not a directory."""
        path = path.strip("/")
        if "\n" in path or _is_unsafe_rev(sha):
            return None
        kind = (
            self._git("cat-file", "--batch-check=%(objecttype)", input=f"{sha}:{path}\n".encode())
            .stdout.decode()
            .strip()
        )
        if kind != "tree":
            return None
        out = self._git("ls-tree", "-z", "--long", f"{sha}:{path}").stdout.decode(
            "utf-8", errors="replace"
        )
        entries = []
        for item in filter(None, out.split("\x00")):
            meta, _, name = item.partition("\t")
            mode, kind_, obj, size = meta.split()
            entries.append(
                TreeEntry(
                    path=f"{path}/{name}" if path else name,
                    mode=mode,
                    type=kind_,  # type: ignore[arg-type]  # ls-tree only prints these three
                    sha=obj,
                    size=None if size == "-" else int(size),
                )
            )
        return entries

    # ------------------------------------------------------------------ history questions

    def is_ancestor(self, a: str, b: str) -> bool:
        """Whether commit ``a`` is reachable from ``b`` (a commit is its own ancestor)."""
        return self._about_commits("ancestor", (a, b), self._is_ancestor)

    def _is_ancestor(self, a_sha: str, b_sha: str) -> bool:
        result = self._git("merge-base", "--is-ancestor", a_sha, b_sha, ok=(0, 1))
        return result.returncode == 0

    def merge_base(self, a: str, b: str) -> str | None:
        a_sha, b_sha = self._require_commits(a, b)
        result = self._git("merge-base", a_sha, b_sha, ok=(0, 1))
        return result.stdout.decode().strip() or None

    def compare(self, base: str, head: str) -> Comparison:
        return self._about_commits("compare", (base, head), self._compare)

    def _compare(self, base_sha: str, head_sha: str) -> Comparison:
        commits = self._text("rev-list", "--reverse", "--topo-order", f"{base_sha}..{head_sha}")
        behind = self._text("rev-list", "--count", f"{head_sha}..{base_sha}")
        ahead = tuple(commits.split())
        return Comparison(
            base=base_sha,
            head=head_sha,
            merge_base=self.merge_base(base_sha, head_sha),
            ahead_by=len(ahead),
            behind_by=int(behind),
            commits=ahead,
        )

    def mergeable(self, base_sha: str, head_sha: str) -> bool:
        """Whether ``head_sha`` merges into ``base_sha`` without conflicts."""
        return self._about_commits("mergeable", (base_sha, head_sha), self._merges_cleanly)

    def _merges_cleanly(self, base: str, head: str) -> bool:
        try:
            self._merge_trees(base, head)
        except MergeConflict:
            return False
        return True

    def _merge_trees(self, ours: str, theirs: str) -> str:
        """The tree of a real (merge-ort) merge of two commits; MergeConflict if unclean."""
        if self.merge_base(ours, theirs) is None:
            raise MergeConflict(f"{ours} and {theirs} have no common history")
        result = self._git(
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            "-z",
            ours,
            theirs,
            ok=(0, 1),
        )
        tree, *paths = [p for p in result.stdout.decode("utf-8", "replace").split("\x00") if p]
        if result.returncode == 1:
            conflicted = tuple(dict.fromkeys(paths))
            raise MergeConflict(f"merge conflict in {', '.join(conflicted)}", conflicted)
        return tree

    # ------------------------------------------------------------------ writing objects

    def commit_tree(
        self,
        tree: str,
        *,
        parents: Sequence[str],
        message: str,
        author: Identity,
        committer: Identity | None = None,
    ) -> str:
        """Write a commit object (no ref moves) and return its sha."""
        parent_args = [arg for parent in parents for arg in ("-p", parent)]
        body = message if message.endswith("\n") else f"{message}\n"
        env = _identity_env(author, committer or author)
        result = self._git("commit-tree", tree, *parent_args, input=body.encode(), env=env)
        return result.stdout.decode().strip()

    def write_commit(
        self,
        parent: str | None,
        files: Mapping[str, bytes | None],
        message: str,
        author: Identity,
        committer: Identity | None = None,
    ) -> str:
        """A commit on top of ``parent`` (None: a root commit) whose tree is the parent's
        with ``files`` written (``None`` content deletes the path). No ref moves."""
        parent_sha = self._require_commits(parent)[0] if parent is not None else None
        with tempfile.TemporaryDirectory(prefix="emulator-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            if parent_sha is None:
                self._git("read-tree", "--empty", env=env)
            else:
                self._git("read-tree", f"{parent_sha}^{{tree}}", env=env)
            blobs = self._hash_blobs(Path(tmp), [c for c in files.values() if c is not None])
            entries = []
            for path, content in files.items():
                clean = _clean_path(path)
                if content is None:
                    entries.append(f"0 {ZERO_SHA}\t{clean}")
                else:
                    entries.append(f"100644 {blobs.pop(0)}\t{clean}")
            if entries:
                payload = "".join(f"{entry}\x00" for entry in entries).encode()
                self._git("update-index", "-z", "--index-info", input=payload, env=env)
            tree = self._git("write-tree", env=env).stdout.decode().strip()
        parents = (parent_sha,) if parent_sha else ()
        return self.commit_tree(
            tree, parents=parents, message=message, author=author, committer=committer
        )

    def _hash_blobs(self, scratch: Path, contents: Sequence[bytes]) -> list[str]:
        """Write blobs in one ``hash-object`` (exact bytes, no filters); shas in order."""
        if not contents:
            return []
        paths = []
        for i, content in enumerate(contents):
            blob_path = scratch / f"blob-{i}"
            blob_path.write_bytes(content)
            paths.append(str(blob_path))
        payload = "".join(f"{p}\n" for p in paths).encode()
        out = self._text("hash-object", "-w", "--no-filters", "--stdin-paths", input=payload)
        return out.split()

    # ------------------------------------------------------------------ moving refs

    def update_ref(
        self,
        ref: str,
        new_sha: str,
        *,
        old_sha: str | None = None,
        force: bool = True,
    ) -> None:
        """Point ``ref`` at ``new_sha``.

        ``old_sha``: None = whatever is there; ``""`` or ZERO_SHA = must not exist;
        a sha = must be exactly there (RefConflict otherwise). ``force=False`` refuses
        (NotFastForward) unless the current value is an ancestor of ``new_sha``.
        """
        name = qualify_ref(ref)
        expected = _normalise_expected(old_sha)
        if not force:
            current = expected if expected is not None else (self.ref_sha(name) or ZERO_SHA)
            if current != ZERO_SHA and not self.is_ancestor(current, new_sha):
                raise NotFastForward(name, current, new_sha)
            # Pin what was checked: a push racing in between must not slip past.
            expected = current
        self._update_ref(name, new_sha, expected)

    def create_ref(self, ref: str, sha: str) -> None:
        """Create ``ref``; RefConflict if it already exists."""
        self.update_ref(ref, sha, old_sha=ZERO_SHA)

    def delete_ref(self, ref: str, old_sha: str | None = None) -> None:
        """Delete ``ref`` (only if at ``old_sha`` when given); ObjectNotFound if absent."""
        name = qualify_ref(ref)
        expected = _normalise_expected(old_sha)
        if expected in (None, ZERO_SHA) and self.ref_sha(name) is None:
            raise ObjectNotFound(f"no such ref: {name}")
        argv = ["update-ref", "-m", "emulator: delete", "-d", name]
        if expected is not None and expected != ZERO_SHA:
            argv.append(expected)
        self._checked_ref_command(argv, name, expected)

    def _update_ref(self, name: str, new_sha: str, expected: str | None) -> None:
        new = self._peel_object(new_sha)
        if new is None:
            raise ObjectNotFound(f"no such object: {new_sha}")
        argv = ["update-ref", "-m", "emulator", name, new]
        if expected is not None:
            argv.append(expected)
        self._checked_ref_command(argv, name, expected)

    def _checked_ref_command(self, argv: list[str], name: str, expected: str | None) -> None:
        """Run an update-ref; on failure tell a lost race (RefConflict) from other errors
        by reading the ref back, rather than by parsing git's messages."""
        result = self._git(*argv, ok=range(256))
        if result.returncode == 0:
            return
        actual = self.ref_sha(name) or ZERO_SHA
        if expected is not None and actual != expected:
            raise RefConflict(name, expected, actual)
        raise _error_from(["git", *argv], result)

    def _peel_object(self, sha: str) -> str | None:
        if _is_unsafe_rev(sha):
            return None
        out = self._text("cat-file", "--batch-check=%(objectname)", input=f"{sha}\n".encode())
        return None if out.endswith("missing") or out.endswith("ambiguous") else out

    # ------------------------------------------------------------------ merging

    def merge(
        self,
        base_ref: str,
        head_sha: str,
        *,
        method: MergeMethod,
        title: str,
        message: str,
        author: Identity,
        committer: Identity,
    ) -> str:
        """Merge ``head_sha`` into branch ``base_ref`` the way GitHub's merge button does,
        and advance the branch (conditionally: RefConflict if it moved meanwhile).

        - merge: a two-parent commit (base head, head_sha) titled ``title``.
        - squash: one commit on the base head with the merged tree, by ``author``.
        - rebase: each commit of head not in base replayed on the base head, keeping
          its author and message; commits that become empty are dropped.

        Returns the new head of the base branch. MergeConflict if it does not merge cleanly.
        """
        name = qualify_ref(base_ref)
        base = self.ref_sha(name)
        if base is None:
            raise ObjectNotFound(f"no such branch: {name}")
        (head,) = self._require_commits(head_sha)
        if method == "rebase":
            new = self._replay(base, head, committer)
        else:
            tree = self._merge_trees(base, head)
            new = self.commit_tree(
                tree,
                parents=(base, head) if method == "merge" else (base,),
                message=_join_message(title, message),
                author=author,
                committer=committer,
            )
        if new != base:
            self._update_ref(name, new, base)
        return new

    def _replay(self, onto: str, head: str, committer: Identity) -> str:
        """Cherry-pick ``onto..head`` (merge commits skipped, as git rebase does) onto ``onto``."""
        if self.merge_base(onto, head) is None:
            raise MergeConflict(f"{onto} and {head} have no common history")
        current, current_tree = onto, self.commit_info(onto).tree
        for record in self._log("--reverse", "--topo-order", "--no-merges", f"{onto}..{head}"):
            commit = record.info
            parent_tree = self.commit_info(commit.parents[0]).tree if commit.parents else None
            tree = self._cherry_pick_tree(current_tree, commit.tree, parent_tree)
            if tree == current_tree:
                continue
            author = Identity(commit.author_name, commit.author_email, record.raw_author_date)
            current = self.commit_tree(
                tree,
                parents=(current,),
                message=commit.message,
                author=author,
                committer=committer,
            )
            current_tree = tree
        return current

    def _cherry_pick_tree(self, onto_tree: str, picked_tree: str, parent_tree: str | None) -> str:
        """The tree of applying (parent_tree -> picked_tree) to onto_tree.

        git 2.39's merge-tree cannot take an explicit merge base, so build throwaway
        commits whose only common ancestor has ``parent_tree``: merge-ort then does
        exactly the three-way merge a cherry-pick does. The scaffolding commits are
        unreferenced and left to gc.
        """
        if parent_tree == onto_tree:
            return picked_tree
        base_tree = parent_tree or self._text("mktree", input=b"")
        scaffold = EMULATOR_IDENTITY
        base = self.commit_tree(base_tree, parents=(), message="replay base", author=scaffold)
        ours = self.commit_tree(onto_tree, parents=(base,), message="onto", author=scaffold)
        theirs = self.commit_tree(picked_tree, parents=(base,), message="pick", author=scaffold)
        return self._merge_trees(ours, theirs)


# --------------------------------------------------------------------------- module helpers


def _is_unsafe_rev(rev: str) -> bool:
    """Whether ``rev`` is more than a plain name or sha (revision syntax, option, garbage)."""
    return not rev or rev.startswith("-") or _UNSAFE_REV.search(rev) is not None


def _clean_path(path: str) -> str:
    clean = path.strip("/")
    parts = clean.split("/")
    if not clean or any(p in ("", ".", "..", ".git") for p in parts) or "\x00" in clean:
        raise GitError(f"invalid path: {path!r}")
    return clean


def _error_from(argv: Sequence[str], result: subprocess.CompletedProcess[bytes]) -> GitError:
    stderr = result.stderr.decode("utf-8", errors="replace").strip()
    return GitError(
        f"{' '.join(argv[:4])}... failed ({result.returncode}): {stderr}",
        argv=argv,
        returncode=result.returncode,
        stderr=stderr,
    )


def _run_git(
    args: Sequence[str],
    *,
    cwd: Path,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    ok: Iterable[int] = (0,),
) -> subprocess.CompletedProcess[bytes]:
    argv = ["git", *args]
    result = subprocess.run(
        argv,
        cwd=cwd,
        input=input,
        capture_output=True,
        env=git_environment(env),
        timeout=_COMMAND_TIMEOUT,
        check=False,
    )
    if result.returncode not in set(ok):
        raise _error_from(argv, result)
    return result

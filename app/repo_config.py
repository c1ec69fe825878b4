"""The repository's own settings for repairbot: ``.github/repairbot.yml``.

Example::

    setup:
      - pip install -e .              # a string runs with `sh -c`
    reproduce: [python, -m, pytest, tests/test_bug.py]   # a list is argv
    test: python -m pytest -q
    agent:
      backend: command
      command: [my-agent, --fix]
    budgets: {repair_attempts: 3, time_limit_seconds: 900}
    merge_method: squash
    network: setup                    # setup may download; nothing else has network
    checkout: {depth: 0, tags: true}  # full history and tags (for setuptools-scm and the like)
    setup_once: true                  # setup installs into $REPAIRBOT_ENV; reused by later steps

A command written as a single string is run with ``sh -c``. That is safe only
because the string comes from the repository owner's own config file, which
they could change anyway; text from an issue is never run through a shell
(see :func:`reproduction_commands`). Any mistake raises :class:`RepoConfigError`
whose message names the field, because it is posted on the issue for the
maintainer to fix.
"""

from __future__ import annotations

import shlex
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from app.github.markdown import fences

CONFIG_PATH = ".github/repairbot.yml"
#: A config file is a few lines; refusing big ones bounds YAML alias expansion.
MAX_CONFIG_BYTES = 64 * 1024


class RepoConfigError(ValueError):
    """The repository's config is unusable; the message is meant for humans."""


class Command(BaseModel):
    """One repository command: an argv list, or a shell string run with ``sh -c``.

    In YAML write a string or a list; stored as JSON it is ``{"argv": [...]}``
    or ``{"shell": "..."}``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: tuple[StrictStr, ...] | None = None
    shell: StrictStr | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_yaml(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"shell": value}
        if isinstance(value, list | tuple):
            return {"argv": value}
        if isinstance(value, dict):
            return value
        raise ValueError("a command is a string (run with sh -c) or a list of arguments")

    @model_validator(mode="after")
    def _exactly_one(self) -> Command:
        if (self.argv is None) == (self.shell is None):
            raise ValueError("a command has either argv or shell, not both")
        if self.argv is not None and (not self.argv or not self.argv[0]):
            raise ValueError("a command list must start with the program to run")
        if self.shell is not None and not self.shell.strip():
            raise ValueError("a command must not be empty")
        return self

    @classmethod
    def of(cls, argv: list[str] | tuple[str, ...]) -> Command:
        return cls(argv=tuple(argv))

    def to_argv(self) -> list[str]:
        """What to execute. A shell string becomes ``["sh", "-c", string]``."""
        if self.shell is not None:
            return ["sh", "-c", self.shell]
        assert self.argv is not None
        return list(self.argv)

    def display(self) -> str:
        """How a human would type it (for logs, comments, evidence)."""
        if self.shell is not None:
            return self.shell
        assert self.argv is not None
        return shlex.join(self.argv)


class AgentConfig(BaseModel):
    """Which coding agent proposes fixes.

    ``backend: command`` runs ``command`` (any CLI agent) in the workspace.
    ``backend: http`` calls an OpenAI-compatible or Anthropic API with
    ``model``; ``api_key_env`` names the worker environment variable holding
    the key, and only names the operator has offered are honoured.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["command", "http"]
    command: Command | None = None
    provider: Literal["openai", "anthropic"] | None = None
    model: StrictStr | None = Field(default=None, min_length=1)
    base_url: StrictStr | None = Field(default=None, pattern=r"^https?://")
    api_key_env: StrictStr | None = Field(default=None, pattern=r"^[A-Z][A-Z0-9_]*$")
    max_files: StrictInt = Field(default=8, ge=1, le=50)

    @model_validator(mode="after")
    def _backend_fields(self) -> AgentConfig:
        http_fields = ("provider", "model", "base_url", "api_key_env")
        if self.backend == "command":
            if self.command is None:
                raise ValueError("backend 'command' needs `command` (the agent to run)")
            given = [name for name in http_fields if getattr(self, name) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} only apply to backend 'http'")
        else:
            if self.command is not None:
                raise ValueError("`command` only applies to backend 'command'")
            if self.provider is None or self.model is None:
                raise ValueError("backend 'http' needs `provider` (openai|anthropic) and `model`")
        return self


class Budgets(BaseModel):
    """Limits of one run. Separate budgets, separately spent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Agent proposals tried before the run gives up (a review starts a new one).
    repair_attempts: StrictInt = Field(default=3, ge=1, le=10)
    #: Extra tries when the agent tool itself fails (crashes, unusable reply).
    tool_retries: StrictInt = Field(default=2, ge=0, le=5)
    #: Wall-clock limit for each command (setup, reproduce, test, agent).
    time_limit_seconds: StrictInt = Field(default=900, ge=1, le=3 * 3600)
    #: Wall-clock limit for the whole repair, all attempts included (time spent
    #: waiting for a review does not count). Enforced by a durable timer, also
    #: in the middle of an attempt.
    total_seconds: StrictInt = Field(default=4 * 3600, ge=60, le=24 * 3600)
    #: Model tokens (input + output) the agent may use in the whole run; none: no cap.
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    #: Model cost in US dollars (from the operator's price table); none: no cap.
    max_cost_usd: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _fits(self) -> Budgets:
        if self.time_limit_seconds > self.total_seconds:
            raise ValueError("time_limit_seconds cannot exceed total_seconds")
        return self


class CheckoutConfig(BaseModel):
    """How much of git the workspace carries (version tools such as
    setuptools-scm read tags and history): ``depth`` commits of history (0:
    all of it) and, with ``tags``, the repository's tags."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    depth: StrictInt = Field(default=1, ge=0, le=100_000)
    tags: StrictBool = False


class RepoConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    setup: list[Command] = Field(default_factory=list, max_length=20)
    reproduce: Command | None = None
    test: Command | None = None
    agent: AgentConfig | None = None
    budgets: Budgets = Field(default_factory=Budgets)
    merge_method: Literal["merge", "squash", "rebase"] = "squash"
    trigger_label: StrictStr = Field(default="repairbot", min_length=1, max_length=50)
    approval_ttl_hours: StrictInt = Field(default=72, ge=1, le=30 * 24)
    on_base_moved: Literal["reverify", "rereview"] = "reverify"
    cleanup_branch_on_cancel: StrictBool = True
    #: ``setup``: setup commands may reach the network (to install dependencies);
    #: reproduction, tests and the agent never do. ``none`` (default): no command does.
    network: Literal["none", "setup"] = "none"
    #: Keep the proposal's branch after its pull request merged (default: delete it).
    keep_branch_after_merge: StrictBool = False
    #: How long a proposal waits for an approving review before the run ends.
    review_wait_seconds: StrictInt = Field(default=14 * 24 * 3600, ge=60, le=90 * 24 * 3600)
    #: While waiting, how often the run re-reads GitHub for changes humans made
    #: without a webhook reaching it (the interval doubles while nothing changes).
    drift_check_seconds: StrictInt = Field(default=600, ge=5, le=24 * 3600)
    #: Bot accounts whose trigger label counts (other bots are ignored).
    allowed_bots: list[StrictStr] = Field(default_factory=list, max_length=20)
    #: Setup installs into ``$REPAIRBOT_ENV`` (outside the checkout): run it once,
    #: on the base commit, and let every later step of the run reuse what it
    #: built, read-only (see activities/environments.py). Off: setup runs
    #: before every step, as for setups that write into the checkout.
    setup_once: StrictBool = False
    #: History and tags fetched into every workspace (default: the commit alone).
    checkout: CheckoutConfig = Field(default_factory=CheckoutConfig)


def parse_repo_config(text: str | None) -> RepoConfig:
    """Parse the file's text; ``None`` (no file) means all defaults."""
    if text is None:
        return RepoConfig()
    if len(text.encode()) > MAX_CONFIG_BYTES:
        raise RepoConfigError(f"{CONFIG_PATH} is larger than {MAX_CONFIG_BYTES // 1024} KiB")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RepoConfigError(f"{CONFIG_PATH} is not valid YAML: {_yaml_problem(exc)}") from None
    if data is None:
        return RepoConfig()
    if not isinstance(data, dict):
        raise RepoConfigError(
            f"{CONFIG_PATH} must be a mapping of settings (like `test: make test`), "
            f"not a {type(data).__name__}"
        )
    try:
        return RepoConfig.model_validate(data)
    except ValidationError as exc:
        raise RepoConfigError(_explain(exc)) from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(problem)


def _explain(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown setting (check the spelling)"
        elif error["type"] not in ("missing", "value_error") and not isinstance(
            error.get("input"), dict | list
        ):
            message = f"{message} (got {error.get('input')!r})"
        lines.append(f"`{field}`: {message}")
    problems = "\n".join(f"- {line}" for line in lines)
    return f"{CONFIG_PATH} has {len(lines)} problem(s):\n{problems}"


# -- the reproduction block in an issue -------------------------------------------

REPRO_INFO = "repro"


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced code block a reader of the rendered text sees, as
    ``(info string, content)`` (see :mod:`app.github.markdown`: the same scanner as
    slash commands; blocks inside HTML comments do not count)."""
    return [(fence.info, fence.content) for fence in fences(text)]


def reproduction_from_issue(body: str) -> str | None:
    """The text of the first visible fenced code block whose info string is ``repro``.

    ```` ```repro ```` quoted inside another code block, or hidden in an HTML
    comment (GitHub does not render it, so a maintainer never saw it), does
    not count. ``None`` when there is no such block or it is blank.
    """
    for info, content in fenced_blocks(body):
        words = info.split()
        if words and words[0].lower() == REPRO_INFO:
            return content if content.strip() else None
    return None


def reproduction_commands(block: str) -> list[Command]:
    """Split a repro block into commands, one per line, as argv lists.

    The block comes from issue text, which anyone may write, so it is never
    given to a shell: each line is split with shell quoting rules into an
    argv (pipes, ``&&`` and redirections are plain arguments). Blank lines and
    ``#`` comments are skipped, a trailing backslash continues a line, and a
    pasted prompt (``$ ``) is dropped. The run starts only when a maintainer
    asked for it, and the commands run in the same sandbox as the
    repository's own.
    """
    commands: list[Command] = []
    pending = ""
    for number, raw in enumerate(block.split("\n"), start=1):
        line = pending + raw
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        stripped = line.strip()
        if stripped.startswith("$ "):
            stripped = stripped[2:]
        try:
            argv = shlex.split(stripped, comments=True)
        except ValueError as exc:
            raise RepoConfigError(f"the repro block in the issue, line {number}: {exc}") from None
        if argv:
            commands.append(Command.of(argv))
    if pending.strip():
        raise RepoConfigError("the repro block in the issue ends with a line continuation")
    return commands

"""What crosses the line between handlers and runs: the run request, the
command request and the signals, as models, with the signals' names.

Handlers build these from webhook events; workflows validate them back from
the JSON the engine keeps in history (``model_dump(mode="json")`` on the way
in, ``model_validate`` on the way out). Requests ignore keys they do not know,
so a request recorded by an older build still loads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

#: Signal names, shared by the handlers that send and the workflows that wait.
REVIEW = "review"
PR_CLOSED = "pr_closed"
PR_SYNCHRONIZED = "pr_synchronized"
#: Sent by ``Runtime.resume`` (operator action) to a run parked for a human.
OPERATOR_RESUME = "operator_resume"


class RunRequest(BaseModel):
    """The repair run's input: what the event said. The run fixes the rest
    (base commit, budgets, policy) itself, at its start: the work contract."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    repo: str
    repo_id: int | None = None
    owner: str = ""
    name: str = ""
    default_branch: str
    clone_url: str
    installation_id: int
    issue_number: int
    issue_title: str
    issue_body: str = ""
    #: Who wrote the issue: its repro block counts only if they may write.
    issue_author: str | None = None
    #: ``label`` or ``comment`` (a ``/repair`` command, already permission-checked).
    trigger: Literal["label", "comment"] = "label"
    requested_by: str
    #: The label that started a label-triggered run.
    label: str | None = None
    #: The label's sender is a bot account (ignored unless the repo allows it).
    sender_is_bot: bool = False
    delivery_id: str = ""
    #: A retry: read the issue's title, body and author as they are now (the
    #: recorded ones are from the event that started the first run).
    reread_issue: bool = False


#: The answer to ``/repair help`` and to an unknown subcommand. Commands are in
#: code spans, so quoting this text back can never issue one.
HELP = """\
repairbot understands these commands from people with write access, each at the start of a line:

| command | what it does |
| --- | --- |
| `/repair` | start a repair run for this issue |
| `/repair status` | show where the run is |
| `/repair retry` | try again after a failed or rejected attempt |
| `/repair cancel` | stop the run (evidence is kept) |
| `/repair help` | show this message |
"""


class SlashCommandSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: ``repair``, ``cancel``, ``retry``, ``status``, ``help`` or ``unknown``.
    verb: str
    args: str = ""


class SlashCommandRequest(BaseModel):
    """The slash-command workflow's input (keyed by the comment's id)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    command: SlashCommandSpec
    author: str
    comment_id: int
    on_pull_request: bool = False
    request: RunRequest


class Review(BaseModel):
    """A review of a run's pull request, as the run judges it: the one model
    for a review, whether a webhook told the run (:class:`ReviewSignal`) or
    the drift check read it from GitHub (``github.observe``'s ``reviews``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    #: GitHub's review id. Drift checks recorded before the review models were
    #: one named it ``id``: their results still load.
    review_id: int = Field(validation_alias=AliasChoices("review_id", "id"))
    #: Lowercased: ``approved``, ``changes_requested``, ``commented``, ``dismissed``.
    state: str
    commit_id: str
    reviewer: str
    body: str = ""
    #: When the reviewer submitted it: approval expiry counts from here.
    submitted_at: str | None = None

    def observed(self, pull_number: int) -> ReviewSignal:
        """This review as the signal a webhook would have sent (the drift check
        found it on the pull request instead)."""
        return ReviewSignal(action="observed", pull_number=pull_number, **self.model_dump())


class ReviewSignal(Review):
    """A review the run is told about, on which pull request and why."""

    #: ``submitted`` or ``dismissed`` (webhooks), ``observed`` (the drift check).
    action: str
    pull_number: int


class PullClosedSignal(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    number: int
    merged: bool = False
    merge_commit_sha: str | None = None
    by: str = ""


class PullSynchronizedSignal(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    number: int
    head_sha: str
    by: str = ""

"""The repair run's share of its installation's capacity (deterministic:
the decisions are the ``caps.*`` activities' answers, the waiting is a
durable timer).

A run holds one of its installation's slots while it does costly work
(reproducing, repairing, publishing, merging) and gives it back while it
waits for a review and when its work round ends. With every slot taken it
says so in its status comment and waits, holding no worker, asking again
after a growing pause. When the installation's model spend for the day has
reached its cap, the run stops before the costly work and says why.
"""

from __future__ import annotations

from app.contracts import installation_caps as caps
from app.workflows.calls import call
from app.workflows.repair_base import Finished, RunBase
from app.workflows.state import Next

#: The first pause before asking for a slot again, and the longest.
FIRST_WAIT_SECONDS = 15.0
LONGEST_WAIT_SECONDS = 600.0
#: Phases that need no slot: waiting for a person costs nothing.
FREE_PHASES: frozenset[Next] = frozenset({"awaiting-review", "done"})
RETRY_TOMORROW = (
    "Comment `/repair retry` after 00:00 UTC, or ask the operator to raise "
    "`REPAIRBOT_MAX_SPEND_USD_PER_DAY_PER_INSTALLATION`."
)


class InstallationSlot:
    def __init__(self, run: RunBase) -> None:
        self.run = run
        self.held = False
        #: Whether the grant took a slot row (with the active-run cap off, none).
        self.taken = False
        self.calls = 0

    def _step(self) -> str:
        self.calls += 1
        return f"installation-slot-{self.calls}"

    async def before(self, phase: Next) -> None:
        """Hold a slot for ``phase`` if it needs one; give it back if not."""
        if phase in FREE_PHASES:
            await self.release()
        else:
            await self.hold()

    async def hold(self) -> None:
        if self.held:
            return
        ctx = self.run.ctx
        asked = caps.SlotInput(installation_id=self.run.request.installation_id)
        wait = FIRST_WAIT_SECONDS
        said: int | None = None
        while True:
            answer = await call(ctx, caps.take_installation_slot, asked, step=self._step())
            if answer.spend_capped:
                raise Finished(
                    "cost-budget-exhausted",
                    f"Stopped before starting work: this installation's runs have spent "
                    f"${answer.spent_usd:.2f} on the model today (UTC), and its daily cap "
                    f"is ${answer.cap_usd:.2f}.",
                    next_steps=RETRY_TOMORROW,
                )
            if answer.granted:
                self.held = True
                self.taken = answer.slot_taken
                if said is not None:
                    await self.run.report(detail="A slot is free: this run is starting.")
                return
            if answer.active != said:
                said = answer.active
                await self.run.report(
                    detail=(
                        f"Waiting: {answer.active} runs of this installation are active; "
                        "this run starts when one ends."
                    )
                )
            await ctx.sleep(wait)
            wait = min(wait * 2, LONGEST_WAIT_SECONDS)

    async def release(self) -> None:
        if not self.held:
            return
        if not self.taken and self.run.ctx.patched("release-only-a-taken-slot"):
            # Nothing was taken (the active-run cap is off): nothing to give
            # back. Runs recorded before this change asked to release anyway.
            self.held = False
            return
        await call(
            self.run.ctx,
            caps.release_installation_slot,
            caps.SlotInput(installation_id=self.run.request.installation_id),
            step=self._step(),
        )
        self.held = False

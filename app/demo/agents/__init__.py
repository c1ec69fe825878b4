"""Command agents that ship with repairbot (in the wheel too), for the demo and
the tests: scripts run as their own processes inside the sandbox, which mounts
this folder read-only (``app.sandbox.policy.EXAMPLE_AGENTS``). Importing the
package runs nothing."""

"""Several repairbot machines on one host: a ``repairbot web`` process and
``repairbot worker`` processes, each with a data directory (workspaces) and a
worker id of its own, sharing only what real machines share: PostgreSQL,
Redis and the network.

Used by the several-machines test and by the load benchmark.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.config import Settings
from app.demo.spawn import spawn_repairbot


class MachineProcess:
    """One repairbot process, started with ``settings`` as its whole environment."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        argv: list[str],
        log_path: Path,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self.argv = argv
        self.log_path = log_path
        #: Variables for this process only, over this process's own environment.
        self.extra_env = dict(extra_env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.peak_rss_kib = 0
        #: CPU seconds (user + system) of this machine's processes so far: its
        #: own, and its reaped children's (git, the sandbox, the agent),
        #: summed over every incarnation (a restart adds a new process).
        self.cpu_seconds = 0.0
        self.children_cpu_seconds = 0.0
        self._cpu_before = (0.0, 0.0)  # what earlier incarnations used
        #: Times this machine's process exited by itself and was started again.
        self.restarts = 0
        self._killed = False

    def start(self) -> MachineProcess:
        with self.log_path.open("ab") as log:
            self.process = spawn_repairbot(
                self.argv, self.settings, log=log, extra_env=self.extra_env
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was never started"
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def sample_usage(self) -> None:
        """Read the process's peak resident set (KiB, the kernel's VmHWM) and
        its CPU time so far (``/proc/<pid>/stat``)."""
        if not self.alive():
            return
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_rss_kib = max(self.peak_rss_kib, int(line.split()[1]))
            # Fields after the command name (which may hold spaces): utime is
            # the 14th field of the line, stime, cutime, cstime follow.
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            return
        tick = os.sysconf("SC_CLK_TCK")
        own = (int(fields[11]) + int(fields[12])) / tick
        children = (int(fields[13]) + int(fields[14])) / tick
        self.cpu_seconds = self._cpu_before[0] + own
        self.children_cpu_seconds = self._cpu_before[1] + children

    def kill(self) -> None:
        """SIGKILL: the machine vanishes mid-whatever it was doing."""
        self._killed = True
        if self.alive():
            self.sample_usage()
            os.kill(self.pid, signal.SIGKILL)
            assert self.process is not None
            self.process.wait()

    def revive(self) -> bool:
        """Start the process again if it exited by itself (not killed or stopped
        here), as a supervisor's restart policy would; whether it did."""
        if self.process is None or self._killed or self.alive():
            return False
        self.restarts += 1
        self._cpu_before = (self.cpu_seconds, self.children_cpu_seconds)
        self.start()
        return True

    def stop(self) -> None:
        self._killed = True
        if self.alive():
            self.sample_usage()
            assert self.process is not None
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Fleet:
    """The machines of one deployment; ``settings`` carry the shared URLs."""

    root: Path
    settings: Settings
    machines: list[MachineProcess] = field(default_factory=list)
    #: Variables every machine gets beside the settings (a benchmark's hooks).
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def web(self, port: int, *, name: str = "web") -> MachineProcess:
        settings = self._machine_settings(name)
        argv = ["web", "--host", "127.0.0.1", "--port", str(port)]
        return self._add(
            MachineProcess(name, settings, argv, self.root / f"{name}.log", self.extra_env)
        )

    def worker(self, name: str, **overrides: object) -> MachineProcess:
        settings = self._machine_settings(name).with_overrides(**overrides)
        return self._add(
            MachineProcess(name, settings, ["worker"], self.root / f"{name}.log", self.extra_env)
        )

    def _machine_settings(self, name: str) -> Settings:
        return self.settings.with_overrides(data_dir=self.root / name, worker_id=name)

    def _add(self, machine: MachineProcess) -> MachineProcess:
        machine.settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.machines.append(machine)
        return machine

    def revive(self) -> list[str]:
        """Restart every machine whose process exited by itself (Fly's
        ``restart = always``); the names restarted."""
        return [m.name for m in self.machines if m.revive()]

    def sample_usage(self) -> None:
        for machine in self.machines:
            machine.sample_usage()

    def stop(self) -> None:
        for machine in self.machines:
            machine.stop()

    def logs(self, tail: int = 4000) -> str:
        return "\n".join(f"--- {m.name} ---\n{m.log()[-tail:]}" for m in self.machines)


def wait_healthy(url: str, machine: MachineProcess, timeout: float = 60.0) -> None:
    """Block until ``url`` answers 200 (the web machine is up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not machine.alive():
            raise RuntimeError(f"{machine.name} exited:\n{machine.log()[-4000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer in {timeout}s")

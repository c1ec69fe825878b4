"""The namespace sandbox every piece of repository code runs in (see :mod:`.policy`)."""

from app.sandbox.forward import PortForward
from app.sandbox.launch import Backend, Launch, backend_for, describe, prepare
from app.sandbox.policy import MODES, Isolation, Mode, SandboxUnavailable, parse_mode

__all__ = [
    "MODES",
    "Backend",
    "Isolation",
    "Launch",
    "Mode",
    "PortForward",
    "SandboxUnavailable",
    "backend_for",
    "describe",
    "parse_mode",
    "prepare",
]

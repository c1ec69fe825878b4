"""The version repairbot reports (``--version``, the start-up line, ``repairbot_build_info``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """The installed distribution's version; a checkout that was never
    installed says so instead of guessing."""
    try:
        return version("repairbot")
    except PackageNotFoundError:
        return "0+uninstalled"

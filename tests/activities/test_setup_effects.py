"""Carrying what setup wrote into one checkout to another (activities/setup_effects.py)."""

from __future__ import annotations

import os
from pathlib import Path

from activities import setup_effects


def saved_tree(tmp_path: Path) -> Path:
    saved = tmp_path / "saved"
    (saved / "src" / "pkg.egg-info").mkdir(parents=True)
    (saved / "src" / "pkg.egg-info" / "PKG-INFO").write_text("Name: pkg\n")
    return saved


def test_a_symlink_the_patch_planted_is_never_written_through(tmp_path: Path) -> None:
    """The candidate's checkout has ``src`` as a link to a directory outside:
    copying ``src/pkg.egg-info`` there would write where the link points."""
    saved = saved_tree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    os.symlink(outside, checkout / "src")
    copied = setup_effects.apply(saved, ["src/pkg.egg-info"], checkout)
    assert copied == [] and list(outside.iterdir()) == []


def test_a_path_the_patch_added_is_left_alone(tmp_path: Path) -> None:
    saved = saved_tree(tmp_path)
    checkout = tmp_path / "checkout"
    (checkout / "src" / "pkg.egg-info").mkdir(parents=True)
    (checkout / "src" / "pkg.egg-info" / "PKG-INFO").write_text("Name: the patch's\n")
    assert setup_effects.apply(saved, ["src/pkg.egg-info"], checkout) == []
    assert (checkout / "src" / "pkg.egg-info" / "PKG-INFO").read_text() == "Name: the patch's\n"


def test_saved_paths_are_copied_into_a_plain_checkout(tmp_path: Path) -> None:
    saved = saved_tree(tmp_path)
    checkout = tmp_path / "checkout"
    (checkout / "src").mkdir(parents=True)
    assert setup_effects.apply(saved, ["src/pkg.egg-info"], checkout) == ["src/pkg.egg-info"]
    assert (checkout / "src" / "pkg.egg-info" / "PKG-INFO").read_text() == "Name: pkg\n"

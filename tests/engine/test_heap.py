"""freeze_startup_heap: start-up garbage is collected, survivors leave the
collector's full passes (bench/loop_lag.py measures what that saves)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from app.engine._heap import freeze_startup_heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def unfreeze_after() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_garbage_is_collected_before_the_freeze(unfreeze_after: None) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle only the collector can free
    gone = weakref.ref(a)
    del a, b
    freeze_startup_heap()
    assert gone() is None


def test_survivors_are_out_of_full_passes(unfreeze_after: None) -> None:
    survivor = Node()
    assert gc.is_tracked(survivor)
    frozen = freeze_startup_heap()
    # Frozen objects still die by reference count (another thread of the
    # test process may drop some), so the count can only have fallen since.
    assert 0 < gc.get_freeze_count() <= frozen
    # A full pass walks generation 2; the survivor is in none of the three.
    assert not any(obj is survivor for g in range(3) for obj in gc.get_objects(g))
    gc.unfreeze()
    assert any(obj is survivor for obj in gc.get_objects(2))

"""Counts per key that forget a key when it drops to zero (connections,
streams or bytes per client): a client that has nothing open leaves nothing
behind, so the map cannot grow with every address ever seen."""

from __future__ import annotations


class Tally(dict[str, int]):
    def add(self, key: str, amount: int = 1) -> int:
        self[key] = self.get(key, 0) + amount
        return self[key]

    def remove(self, key: str, amount: int = 1) -> None:
        left = self.get(key, 0) - amount
        if left > 0:
            self[key] = left
        else:
            self.pop(key, None)

"""A repository named by owner and name, the key every REST call takes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RepoRef:
    owner: str
    name: str

    @classmethod
    def parse(cls, full_name: str) -> RepoRef:
        owner, sep, name = full_name.partition("/")
        if not sep or not owner or not name or "/" in name:
            raise ValueError(f"not an owner/name repository: {full_name!r}")
        return cls(owner, name)

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    def __str__(self) -> str:
        return self.full_name

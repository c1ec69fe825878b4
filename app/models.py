"""Imports every table module so SQLModel.metadata knows the whole schema
(used by migrations and by tests that build the schema)."""

from app.engine import tables as engine_tables

__all__ = ["engine_tables"]

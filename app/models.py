"""Imports every table module so SQLModel.metadata knows the whole schema
(used by migrations and by tests that build the schema)."""

from app import app_tables
from app.engine import tables as engine_tables

__all__ = ["app_tables", "engine_tables"]

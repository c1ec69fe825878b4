"""Alembic revisions (one module each; Alembic loads them by path)."""

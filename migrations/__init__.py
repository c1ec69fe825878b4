"""Alembic migration scripts, shipped as a package so an installed repairbot finds them
(see app/operations/migrate.py)."""

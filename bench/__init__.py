"""Benchmarks. ``python -m bench.engine`` measures the durable runtime against
DBOS Transact; see docs/benchmarks.md for the figures and how to read them."""

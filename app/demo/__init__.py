"""The local stack (emulated GitHub + repairbot) used by ``repairbot demo`` and
the end-to-end tests."""

"""The composition root: the only place that puts the pieces together.

``handlers/``, ``activities/`` and ``app/workflows/`` import the libraries of
``app/`` (and the engine); this package, above them all, imports those and
wires them into processes: the ``repairbot`` command (:mod:`.cli`), the web
process (:mod:`.web_process`), the worker process (:mod:`.worker_process`)
and the workflows and activities a build runs (:mod:`.catalog`). Nothing
below imports it (``tests/test_import_direction.py`` enforces that).
"""

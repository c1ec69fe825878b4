"""What crosses between parts of repairbot without their code: the models
and names workflows, activities and handlers agree on.

One module per activity group (its input and result models and its
``activity_contract``s: name, retry, timeouts), plus the run requests and
signals (:mod:`.requests`, :mod:`.triage_inputs`) and workflow ids
(:mod:`.ids`). Recorded histories hold these models' JSON: fields and names
change only as docs/developing.md says. This package imports neither
``app.workflows`` nor ``activities`` (tests/test_import_direction.py).
"""

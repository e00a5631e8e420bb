"""The probe machinery: a probe set measured on a model, with no Trainer in sight.

``probe_set`` builds the fixed examples and their batches; ``probe_units`` cuts them into rows run together;
``reference`` keeps the drift reference; ``measurements`` turns a unit's maps into per-head statistics;
``probe_pass`` plans and runs one pass over the units and returns values (``records``: what riders hand back);
``probe_context`` is what a run gives the pass, ``adapt`` what differs between tokenizers, configs and devices.
The Trainer-facing side (when to probe, gathering the context from the Trainer, writing and judging the results)
is ``bertwatch.callbacks``.

Importing this package is cheap; each module imports torch itself.
"""

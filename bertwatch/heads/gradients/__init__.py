"""What the gradient pass measures: head importance (``importance``: Michel's gates, attention gradients, integrated
gradients), the run-health signals (``health``) and the length groups the pass runs in on the CPU
(``length_groups``)."""

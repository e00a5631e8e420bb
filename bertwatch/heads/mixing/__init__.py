"""Context mixing beyond raw attention: the measures as pure functions (``mixing_scores``: mixing ratio, ALTI,
rollout, value zeroing) and their model side (``mixing_model``: block weights, recorded block inputs, maps)."""

"""The model side. Here: capture attention (adapters for families outside the attention interface), unwrapping of
wrapped models and their inputs, token roles, the batch layout, model loading, per-example values to grids. One
subpackage per family of statistics: ``maps/`` (the attention maps themselves), ``norms/`` (norm-based),
``mixing/`` (context mixing), ``gradients/`` (importance and run health), ``stability/`` (logits, spectral norms),
``outliers/`` (activation outliers).

Importing this package is cheap; each module imports torch itself.
"""

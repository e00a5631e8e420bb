"""The model side: capture attention (adapters for families outside the attention interface), unwrapping of
wrapped models and their inputs, token roles, per-head statistics, gradient importance, model loading.

Importing this package is cheap; each module imports torch itself.
"""

"""The model side: capture attention, token roles, per-head statistics, gradient importance, model loading.

Importing this package is cheap; each module imports torch itself.
"""

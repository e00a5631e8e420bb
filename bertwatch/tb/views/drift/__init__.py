"""The Drift view (``view_drift.js``): drift from the pretrained maps over steps, read through ``tb/queries.py``."""

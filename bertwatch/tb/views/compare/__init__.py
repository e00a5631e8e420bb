"""The Compare view (``view_compare.js``): two runs' grids side by side, read through ``tb/queries.py``'s ``/grid``."""

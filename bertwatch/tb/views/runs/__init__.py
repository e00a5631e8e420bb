"""The Runs view: every run's verdict and the Trainer's settings (``runs_route``, the ``/runs`` route) and its
table (``view_runs.js``)."""

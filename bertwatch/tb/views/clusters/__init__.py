"""The Clusters view (``view_clusters.js``): the head embedding of ``tb/queries.py``'s ``/embedding`` route."""

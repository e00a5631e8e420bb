"""The Attention maps view (``view_attention.js``): its ``/attention`` route is ``tb/queries.py``'s, its
``/attention_measures`` route ``tb/views/heads/measures.py``'s."""

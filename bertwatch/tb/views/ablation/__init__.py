"""The Ablation view: the ablation tables and pruning curves as summaries (``ablation_summary``), the
``/ablation`` route's answers in words (``ablation_route``) and its drawing (``view_ablation.js``)."""

"""Reports people read: the ablation result and its files, the HTML report, figures. Never imports torch."""

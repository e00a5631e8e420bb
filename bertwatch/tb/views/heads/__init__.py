"""The Heads view (``view_heads.js``) and its panels: the verdict strip (``run_verdict``, ``verdict_strip.js``),
the alert strip (``alert_strip.js``), the activation outliers (``layer_outliers``, ``panel_outliers.js``) and the
weight-vs-contribution mass gap (``measures``, ``panel_mass_gap.js``)."""

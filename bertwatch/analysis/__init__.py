"""``analyze``: every per-head statistic of a model on a list of texts, written as JSON and figures."""

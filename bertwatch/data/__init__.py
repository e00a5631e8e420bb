"""Evaluation data and task metrics: GLUE from local files or the Hub, texts, offline GLUE metrics."""

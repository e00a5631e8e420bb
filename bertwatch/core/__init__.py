"""Rules and vocabulary shared by every part (thresholds, limits, JSON encoding); torch-free, imports nothing of bertwatch."""

"""Linguistic analyses of attention heads: syntax heads on UD, parsing probes, word classes, head clustering."""

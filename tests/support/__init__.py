"""Shared oracles and helpers of the tests: tiny models, plain reference implementations, the tolerance
rule, scripts the multi-process tests launch."""

"""Activation outliers per layer (``activations``): max |x|, kurtosis, outlier dimensions, the delimiters' share,
and the hooks recording each forward call's activations."""

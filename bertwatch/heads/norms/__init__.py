"""Norm-based attention (Kobayashi et al. 2020): each head's weights times the norm of the vectors they weight
(``norm_based``), with each family's attention block (value, output projection, post-attention LayerNorm)."""

"""Training-stability statistics of each head: the pre-softmax score summaries of the capture pass (``logits``:
``max_logit``, ``logit_std``) and the spectral norm of W_Q W_Kᵀ from the weights (``spectral_norms``)."""

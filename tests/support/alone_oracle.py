"""Each example ALONE, unpadded, through the model, then the float64 loops of tests/support/stats_oracle.py and
tests/support/norm_oracle.py: the statistics an example has whatever batch bertwatch puts it in."""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import torch

from bertwatch.heads.roles import token_roles
from tests.support.norm_oracle import reference as norm_reference
from tests.support.stats_oracle import reference_stats

ADAPTERS = ("deberta-v2", "mpnet")


def eager_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The model in ``dtype`` with the plain eager attention (adapter families have no other)."""
    twin = copy.deepcopy(model).to(dtype).eval()
    if str(twin.config.model_type).replace("_", "-") not in ADAPTERS:
        twin.set_attn_implementation("eager")
    return twin


def _alone(model, encoding, autocast: torch.dtype | None):
    batch = {k: torch.tensor([list(v)]) for k, v in encoding.items() if k in ("input_ids", "token_type_ids")}
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    guard = torch.autocast("cpu", dtype=autocast) if autocast is not None else contextlib.nullcontext()
    with torch.no_grad(), guard:
        out = model(**batch, output_attentions=True, output_hidden_states=True)
    attn = torch.stack([a.double() for a in out.attentions], 1)
    hidden = [h.double() for h in out.hidden_states]
    return batch, attn, hidden


def alone_grids(
    model,
    tokenizer,
    encodings,
    reference=None,
    autocast: torch.dtype | None = None,
    norms: bool = False,
) -> dict[str, np.ndarray]:
    """``{name: [layers, heads]}``: every statistic of each example alone, averaged over examples as bertwatch does
    (NaN-skipping mean). Without ``autocast`` the model runs in float64 eager; with it, in float32 eager under the
    same autocast bertwatch uses."""
    dtype = torch.float64 if autocast is None else torch.float32
    model = eager_copy(model, dtype)
    ref_model = None if reference is None else eager_copy(reference, dtype)
    family = str(model.config.model_type).replace("_", "-")
    per: dict[str, list[np.ndarray]] = {}
    for encoding in encodings:
        batch, attn, hidden = _alone(model, encoding, autocast)
        roles = token_roles(batch["input_ids"], batch["attention_mask"], tokenizer, batch.get("token_type_ids"))
        ref = None if ref_model is None else _alone(ref_model, encoding, autocast)[1]
        found = reference_stats(attn.numpy(), roles, None if ref is None else ref.numpy())
        if norms:
            found.update(norm_reference(attn, hidden, _with_base(model, family), family, roles))
        for name, value in found.items():
            per.setdefault(name, []).append(value[0])
    with np.errstate(all="ignore"), _quiet():
        return {name: np.nanmean(np.stack(values), axis=0) for name, values in per.items()}


def _with_base(model, family: str):
    """What tests/support/norm_oracle.py expects: a head model with the encoder under its family attribute."""
    attribute = {"deberta-v2": "deberta"}.get(family, family)
    if hasattr(model, attribute):
        return model
    holder = torch.nn.Module()
    setattr(holder, attribute, model)
    return holder


@contextlib.contextmanager
def _quiet():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield

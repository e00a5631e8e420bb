"""Whether a model's weights are sharded across processes, so that every forward pass is a collective.

Under FSDP2 (``torch.distributed.fsdp.fully_shard``, also what ``accelerate`` and the Trainer's ``fsdp`` option
apply on GPUs) each rank holds a shard of every parameter and a forward pass all-gathers them: a pass run by one
rank alone hangs. bertwatch therefore runs its probe passes and its ablation sweep on every rank, in step.
"""

from __future__ import annotations

from torch import nn

__all__ = ["ShardingError", "check_sharding", "is_sharded", "is_zero3"]


class ShardingError(ValueError):
    """The model is sharded in a way bertwatch has not been tested with."""


def is_sharded(model: nn.Module) -> bool:
    """True when the parameters are FSDP2 shards (DTensors) or FSDP1 flat parameters."""
    for parameter in model.parameters():
        if hasattr(parameter, "full_tensor") or type(parameter).__name__ == "FlatParameter":
            return True
    return any(type(m).__name__ == "FullyShardedDataParallel" for m in model.modules())


def is_zero3(model: nn.Module) -> bool:
    """True when DeepSpeed ZeRO stage 3 partitions the parameters (they carry a ``ds_id``)."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def check_sharding(model: nn.Module) -> None:
    """Refuse the sharding schemes bertwatch has not been tested with, saying what to use instead."""
    if is_zero3(model):
        raise ShardingError(
            "bertwatch has not been tested with DeepSpeed ZeRO stage 3 (partitioned parameters): its probe passes "
            "and gradient statistics could hang or be wrong. Fine-tune with FSDP2 instead (the Trainer's "
            "fsdp=True with fsdp_config={'version': 2}, or accelerate's FSDP2 plugin), or with ZeRO stage 1 or 2; "
            "see docs/distributed.md"
        )

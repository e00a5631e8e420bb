"""Where a tensor's values can be read on the host without stalling a device: the CPU's own tensors.

Reading a GPU tensor's values on the host (``.item()``, ``.tolist()``, ``.cpu()``, ``float(t)``, ``bool(t)``, a
boolean mask's indexing, ``nonzero``) waits until every kernel queued before it has run, so the device idles while
Python catches up. The probe pass reads its results on the host once, at its end; a function it calls per batch
takes a path without host reads on every device where they are not free, and may take a faster path with them on
the CPU. ``HOST_DEVICES`` is that rule's one home: a test that empties it runs the device path on the CPU.
"""

from __future__ import annotations

import torch

__all__ = ["HOST_DEVICES", "reads_free"]

#: The device types whose tensors the host reads without waiting for a queue of kernels.
HOST_DEVICES: tuple[str, ...] = ("cpu",)


def reads_free(device: torch.device | str) -> bool:
    """Whether reading a value of a tensor on ``device`` on the host costs no wait (``HOST_DEVICES``).

    Example:
        >>> reads_free(torch.device("cpu")), reads_free("cuda")
        (True, False)
    """
    return torch.device(device).type in HOST_DEVICES

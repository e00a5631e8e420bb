"""The launcher of the two-process tests: ``torch.distributed.run`` on this machine, on a free local port."""

from __future__ import annotations

import socket
import sys


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the time of asking."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str, processes: int = 2) -> list[str]:
    """The command that runs ``args`` (a script and its arguments, or ``-m module ...``) in ``processes`` local
    processes of one node, their rendezvous on a free port of 127.0.0.1."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(processes),
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *args,
    ]  # fmt: skip

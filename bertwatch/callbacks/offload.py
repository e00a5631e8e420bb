"""Statistics off the training path: jobs on tensors the probe pass hands over, run while training goes on.

``StatsWorker`` runs jobs (``compute_stats``, ``norm_stats``: pure functions of the maps) on one background thread, in
the order they were submitted, and hands their results back on the training thread (:meth:`StatsWorker.collect`),
so the grids reach the event file at the step they were measured and in the same order as when computed inline.

- On CPU the thread takes ``threads`` torch intra-op threads of its own: ``torch.set_num_threads`` called in a
  thread sets that thread's count only (OpenMP's thread-count setting is per thread), so the training thread
  keeps its own. The jobs then compete with training for the cores: they help when the training leaves cores idle
  (a data loader waiting, fewer torch threads than cores) and cost the same CPU time otherwise.
- On CUDA the jobs run on a side stream that first waits for the work queued before the hand-over, and each
  handed-over tensor is marked as used on that stream (``Tensor.record_stream``), so the allocator does not give
  its memory to training before the job is done.

A job's exception is kept and raised by :meth:`collect` on the training thread, inside the Trainer event that
collects it: ``callbacks._safe.contained`` then stops bertwatch with its one warning, as for an inline failure.
The handed-over tensors stay alive until their job ends (the maps of one probe batch: batch × layers × heads × T²
floats).

Where it plugs in: ``Monitor._compute`` (``callbacks.monitor``) calls ``compute_stats`` / ``norm_stats`` per probe
batch and aggregates at once; with a worker it submits them and the monitor writes the step's grids when
:meth:`collect` returns them, at the latest at the next Trainer event (the monitor's plan/execute split).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = ["StatsWorker"]

_STOP = object()


class _Job:
    __slots__ = ("fn", "args", "kwargs", "ready", "result", "error", "done", "key")

    def __init__(self, key: Any, fn: Callable[..., Any], args: tuple, kwargs: dict, ready: Any) -> None:
        self.key, self.fn, self.args, self.kwargs, self.ready = key, fn, args, kwargs, ready
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class StatsWorker:
    """One background thread running statistic jobs in submission order.

    Args:
        device: where the handed-over tensors live; a CUDA device gives the jobs a side stream.
        threads: torch intra-op threads of the worker thread (CPU).

    Example:
        >>> worker = StatsWorker(torch.device("cpu"), threads=1)
        >>> worker.submit("sum", torch.sum, torch.ones(3))
        >>> [(key, float(value)) for key, value in worker.collect()]
        [('sum', 3.0)]
        >>> worker.close()
    """

    def __init__(self, device: torch.device | str = "cpu", threads: int = 1) -> None:
        self.device = torch.device(device)
        self.threads = max(1, int(threads))
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._queue: queue.Queue = queue.Queue()
        self._pending: list[_Job] = []
        self._thread = threading.Thread(target=self._loop, name="bertwatch-stats", daemon=True)
        self._thread.start()

    def submit(self, key: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Queue ``fn(*args, **kwargs)``; its result comes back from :meth:`collect` as ``(key, result)``.

        Call it on the thread that made the tensors (the training thread): on CUDA the job waits for the work
        queued there so far."""
        ready = None
        if self.stream is not None:
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self.device))
            for value in (*args, *kwargs.values()):
                for tensor in _tensors(value):
                    if tensor.is_cuda:
                        tensor.record_stream(self.stream)
        job = _Job(key, fn, args, kwargs, ready)
        self._pending.append(job)
        self._queue.put(job)

    @property
    def busy(self) -> bool:
        """Whether a submitted job has not finished yet."""
        return any(not job.done.is_set() for job in self._pending)

    def collect(self, wait: bool = True) -> list[tuple[Any, Any]]:
        """``(key, result)`` of the jobs finished so far, in submission order (stopping at the first unfinished one
        unless ``wait``, which waits for them all). Raises the first failed job's exception (the jobs before it are
        dropped with it: a failure stops the monitor)."""
        out = []
        while self._pending:
            job = self._pending[0]
            if not wait and not job.done.is_set():
                break
            job.done.wait()
            self._pending.pop(0)
            if job.error is not None:
                self._pending.clear()
                raise job.error
            out.append((job.key, job.result))
        return out

    def close(self) -> None:
        """Stop the thread after the queued jobs (their results are dropped unless collected first)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _loop(self) -> None:
        torch.set_num_threads(self.threads)
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            try:
                job.result = self._run(job)
            except BaseException as err:  # handed to the training thread by collect()
                job.error = err
            finally:
                job.done.set()

    def _run(self, job: _Job) -> Any:
        with torch.no_grad():
            if self.stream is None:
                return job.fn(*job.args, **job.kwargs)
            self.stream.wait_event(job.ready)
            with torch.cuda.stream(self.stream):
                result = job.fn(*job.args, **job.kwargs)
            self.stream.synchronize()
            return result


def _tensors(value: Any) -> list[Tensor]:
    """The tensors in a job argument: a tensor, or a list / tuple / dict of them (one level), or the tensor fields
    of an object such as ``TokenRoles``."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, Tensor)]
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, Tensor)]
    return [v for v in vars(value).values() if isinstance(v, Tensor)] if hasattr(value, "__dict__") else []

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

A job's arguments are dropped as soon as it has run (its result is kept until collected), so the handed-over
tensors live no longer than their job.

Where it plugs in: ``callbacks.probe_pass.start_pass`` hands each probe batch's ``"forward"`` measurements and the
pass's aggregation to the worker; ``callbacks.monitor.Monitor`` publishes the step's results once they are in (see
``docs/callbacks.md``). :func:`offload_threads` is the one home of the policy that decides whether a run has a
worker and how many threads it takes.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

__all__ = ["StatsWorker", "available_cores", "offload_threads"]

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
                job.fn, job.args, job.kwargs, job.ready = None, (), {}, None  # the handed-over tensors go now
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


def _tensors(value: Any, depth: int = 4) -> list[Tensor]:
    """The tensors in a job argument, ``depth`` levels down: a tensor; a list, tuple or mapping of values; the
    fields of an object such as ``TokenRoles``, a ``ProbeBatch`` or a ``Capture`` (modules skipped: their
    parameters are not handed over)."""
    if isinstance(value, Tensor):
        return [value]
    if depth == 0 or value is None or isinstance(value, (str, bytes, int, float, bool, torch.nn.Module)):
        return []
    if isinstance(value, (list, tuple)):
        items: Any = value
    elif isinstance(value, Mapping):
        items = value.values()
    elif hasattr(value, "__dict__"):
        items = vars(value).values()
    else:
        return []
    return [t for item in items for t in _tensors(item, depth - 1)]


def available_cores() -> int:
    """The CPU cores this process may use: those it may run on (``os.sched_getaffinity`` where the platform has
    it, else ``os.cpu_count()``), shared with the other processes of its run on this machine (``LOCAL_WORLD_SIZE``,
    set by ``torchrun`` and ``accelerate launch``)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")
    return max(1, cores // max(1, int(local))) if local.isdigit() else cores


def offload_threads(
    offload: bool | None, device: torch.device | str, cores: int | None = None, threads: int | None = None
) -> int:
    """How many torch threads the statistics worker of a run takes; 0: no worker, the statistics run inline.

    ``offload`` True forces a worker, False forbids it, None (automatic) decides by the device: on CUDA inline
    (a worker there, its jobs on a side stream and one thread launching them, is opt-in until a GPU benchmark has
    measured it); on CPU a worker only when the process has spare cores, ``cores`` (default :func:`available_cores`) more than the training's ``threads`` (default
    ``torch.get_num_threads()``), and it takes the spare ones. On saturated cores a worker costs the same CPU
    time as inline and can only slow training down, so the automatic choice there is inline. A forced CPU worker
    takes the spare cores, at least one thread.

    Example:
        >>> offload_threads(None, "cpu", cores=2, threads=2), offload_threads(None, "cpu", cores=8, threads=4)
        (0, 4)
        >>> offload_threads(True, "cpu", cores=2, threads=2), offload_threads(None, "cuda"), offload_threads(True, "cuda")
        (1, 0, 1)
    """
    if offload is False:
        return 0
    if torch.device(device).type == "cuda":
        return 1 if offload else 0
    spare = (available_cores() if cores is None else cores) - (torch.get_num_threads() if threads is None else threads)
    if offload is None:
        return max(0, spare)
    return max(1, spare)

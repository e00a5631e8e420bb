"""Statistics off the training thread (``callbacks.offload.StatsWorker``): the same values as inline, results in
submission order, the worker's own torch thread count, and a failing job raised on the collecting thread, where
the callbacks' containment turns it into one warning."""

from __future__ import annotations

import threading
import time
import warnings

import pytest
import torch

from bertwatch.callbacks._safe import BertWatchWarning, contained
from bertwatch.callbacks.offload import StatsWorker
from bertwatch.callbacks.probe_set import crop_maps
from bertwatch.heads.capture import capture
from bertwatch.heads.norms import NORM_NAMES, head_grams, norm_stats
from bertwatch.heads.stats import DRIFT_NAMES, STAT_NAMES, compute_stats
from tests.heads.test_norms import batch_and_roles
from tests.support.models import tiny_model


@pytest.fixture
def worker():
    w = StatsWorker("cpu", threads=1)
    yield w
    w.close()


def _probe(seed: int = 0):
    model = tiny_model("bert", seed=seed)
    batch, roles = batch_and_roles(length=11)
    with torch.no_grad(), capture(model, record_values=True) as cap:
        model(**batch)
    return model, roles, cap


def test_statistics_on_the_worker_equal_those_on_the_training_thread(worker) -> None:
    model, roles, cap = _probe()
    _, _, other = _probe(seed=1)
    reference = [m.to(torch.float16) for m in crop_maps(other.attentions, roles.real)]
    names = list(STAT_NAMES + DRIFT_NAMES)
    grams = head_grams(model)
    inline = compute_stats(cap.attentions, roles, names, reference)
    inline_norms = norm_stats(cap.attentions, cap.values, grams, roles, NORM_NAMES, cap.contexts)
    worker.submit("maps", compute_stats, cap.attentions, roles, names, reference)
    worker.submit("norms", norm_stats, cap.attentions, cap.values, grams, roles, NORM_NAMES, cap.contexts)
    got = dict(worker.collect())
    for name in names:
        assert _same(got["maps"][name], inline[name]), name
    for name in NORM_NAMES:
        assert _same(got["norms"][name], inline_norms[name]), name


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal, NaN where the other is NaN (intra_segment_mass is NaN without segments)."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


def test_results_come_back_in_submission_order(worker) -> None:
    def slow(value: float, seconds: float) -> float:
        time.sleep(seconds)
        return value

    for k, seconds in enumerate((0.05, 0.0, 0.02)):
        worker.submit(k, slow, float(k), seconds)
    assert worker.collect() == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert worker.collect() == [] and not worker.busy


def test_the_worker_has_its_own_thread_count(worker) -> None:
    before = torch.get_num_threads()
    worker.submit("threads", torch.get_num_threads)
    assert worker.collect() == [("threads", 1)]
    assert torch.get_num_threads() == before


def test_a_failing_job_is_raised_on_the_collecting_thread_and_contained_there(worker) -> None:
    def broken() -> None:
        raise RuntimeError("a statistic failed")

    worker.submit("ok", float, 1)
    worker.submit("bad", broken)
    worker.submit("after", float, 2)
    with pytest.raises(RuntimeError, match="a statistic failed"):
        worker.collect()
    assert worker.collect() == [], "a failure drops the step's remaining results"

    class Watcher:
        disabled, strict = False, False

        def disable(self, message: str) -> None:
            self.disabled = True
            warnings.warn(message, BertWatchWarning, stacklevel=2)

        @contained("on_step_end")
        def on_step_end(self) -> None:
            worker.collect()

    watcher = Watcher()
    worker.submit("bad", broken)
    with pytest.warns(BertWatchWarning, match="a statistic failed"):
        watcher.on_step_end()
    assert watcher.disabled
    assert threading.current_thread() is threading.main_thread()


def test_the_handed_over_tensors_are_released_when_their_job_has_run(worker) -> None:
    import weakref

    maps = torch.rand(2, 3, 5, 5)
    gone = weakref.ref(maps)
    started = threading.Event()

    def held(tensor: torch.Tensor) -> float:
        started.wait()
        return float(tensor.sum())

    worker.submit("held", held, maps)
    expected = float(maps.sum())
    del maps
    assert gone() is not None, "the worker holds the tensor until its job has run"
    started.set()
    while worker.busy:
        time.sleep(0.001)
    assert gone() is None, "the job's arguments are dropped once it ran, before collect()"
    assert worker.collect() == [("held", expected)]

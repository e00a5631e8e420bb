"""What the plugin's routes read through TensorBoard's data provider (``tb.queries.Queries``), on a real
multiplexer: a series read once and kept while its listing says it is current, read again once a new step arrives,
the latest step alone read where that is enough, and a missing tag or a tag of another kind refused as not found."""

from __future__ import annotations

import numpy as np
import pytest
from tensorboard import context, errors

from bertwatch.tb.writer import metadata as md
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.tb_helpers import make_wsgi_app

pytestmark = pytest.mark.fast

TAG = md.series_tag("pattern_classes")


def _write(folder, steps) -> None:
    with SummaryWriter(str(folder)) as w:
        for step in steps:
            w.add_named_values("pattern_classes", {"vertical": step / 100, "block": 1 - step / 100}, step)


@pytest.fixture
def counted(tmp_path):
    _write(tmp_path / "run", (0, 10, 20))
    _, mux, plugin = make_wsgi_app(tmp_path)
    queries, reads = plugin.queries, []
    provider = queries.data_provider
    original = provider.read_tensors

    def read_tensors(ctx, **kwargs):
        reads.append(kwargs["downsample"])
        return original(ctx, **kwargs)

    provider.read_tensors = read_tensors
    return tmp_path, mux, queries, reads


def test_a_series_is_read_once_while_current_and_again_after_a_new_step(counted) -> None:
    root, mux, queries, reads = counted
    ctx = context.RequestContext()
    first = queries.series(ctx, "", "run", TAG, kind=md.KIND_NAMED_VALUES)
    assert first.steps.tolist() == [0, 10, 20] and len(reads) == 1
    np.testing.assert_allclose(first.values[:, first.content["names"].index("vertical")], [0.0, 0.1, 0.2], rtol=1e-6)
    assert queries.series(ctx, "", "run", TAG) is first and len(reads) == 1  # cached: no new read
    _write(root / "run", (30,))
    mux.Reload()
    again = queries.series(ctx, "", "run", TAG)
    assert again.steps.tolist() == [0, 10, 20, 30] and len(reads) == 2


def test_the_latest_step_alone_is_read_where_that_is_enough(counted) -> None:
    _, _, queries, reads = counted
    latest = queries.series(context.RequestContext(), "", "run", TAG, latest_only=True)
    assert reads == [1] and latest.steps.tolist()[-1] == 20


def test_a_missing_tag_or_another_kind_is_not_found(counted) -> None:
    _, _, queries, _ = counted
    ctx = context.RequestContext()
    with pytest.raises(errors.NotFoundError):
        queries.series(ctx, "", "run", md.series_tag("nothing"))
    with pytest.raises(errors.NotFoundError, match="not a head_grid"):
        queries.series(ctx, "", "run", TAG, kind=md.KIND_HEAD_GRID)
    with pytest.raises(errors.NotFoundError):
        queries.series(ctx, "", "no-such-run", TAG)

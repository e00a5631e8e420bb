"""The bertwatch TensorBoard plugin: read-only JSON routes over ``context.data_provider`` plus static ES modules.

Imports only tensorboard, werkzeug and numpy (TensorBoard imports this module at start-up).

Routes, mounted at ``data/plugin/bertwatch``; ``run``/``tag`` are opaque names used only in a ``RunTagFilter``:

=====================================================  ========================================================
``/index.js``, ``/static/<file>``                      the frontend (allow-listed files only)
``/tags``                                              runs and their bertwatch tags with kind, metadata, maxStep
``/steps?run&tag``                                     the logged steps (and wall times) of one tag
``/grid?run&tag[&step]``                               one ``[layers, heads]`` grid (default: latest step)
``/trajectory?run&tag&layer&head[&max_points]``        one head's value over steps
``/layer_means?run&tag[&max_points]``                  each layer's mean over heads, over steps
``/labels?run[&step]``                                 Clark's behaviour labels from the grids of that step
``/attention?run&tag[&step]&layer[&head]``             tokens and the maps of one layer (or one head)
``/ablation?run[&mode]``                               ablation tables of one mode and the pruning curve
``/embedding?run&tag``                                 2-D head embedding (latest step)
=====================================================  ========================================================

Numbers are JSON numbers; NaN and infinities arrive as the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"`` (TensorBoard's ``json_util.Cleanse``).
"""

from __future__ import annotations

import collections
import concurrent.futures
import importlib.resources
import json
import threading
import warnings

import numpy as np
from tensorboard import errors
from tensorboard.backend import http_util
from tensorboard.data import provider
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from bertwatch.tb import metadata as md

#: The only files ``/static/*`` serves (name -> MIME type); nothing else is ever read from disk.
STATIC_FILES = {
    "api.js": "text/javascript",
    "charts.js": "text/javascript",
    "dom.js": "text/javascript",
    "heatmap.js": "text/javascript",
    "live.js": "text/javascript",
    "scales.js": "text/javascript",
    "view_ablation.js": "text/javascript",
    "view_attention.js": "text/javascript",
    "view_clusters.js": "text/javascript",
    "view_compare.js": "text/javascript",
    "view_drift.js": "text/javascript",
    "view_heads.js": "text/javascript",
    "style.css": "text/css",
}

#: Clark et al.'s behaviour labels, in precedence order: a later rule overrides an earlier one.
LABEL_RULES = (
    ("next", "next", 0.5),
    ("prev", "prev", 0.5),
    ("entropy", "broad", 3.8),
    ("cls_mass", "cls", 0.6),
    ("sep_mass", "sep", 0.6),
    ("punct_mass", "punct", 0.6),
)

_DOWNSAMPLE = 1_000_000_000  # "everything the loader kept"; the real limit is --samples_per_plugin
_MAX_JSON_VALUES = 2_000_000  # cap on the numbers one response may carry
_DEFAULT_MAX_POINTS = 1000


def behaviour_labels(grids: dict) -> np.ndarray:
    """Labels (``object`` array of str or None) from a dict of ``[layers, heads]`` grids, per LABEL_RULES."""
    shape = next(iter(grids.values())).shape
    labels = np.full(shape, None, dtype=object)
    for stat, label, threshold in LABEL_RULES:
        grid = grids.get(stat)
        if grid is None or grid.shape != shape:
            continue
        grid = np.asarray(grid)
        # compare at the grid's own precision: a float32 0.6 is not "> 0.6"
        limit = np.asarray(threshold, dtype=grid.dtype if grid.dtype.kind == "f" else np.float64)
        with np.errstate(invalid="ignore"):
            labels[grid > limit] = label  # NaN compares False
    return labels


def _f32_list(array) -> list:
    """Nested lists of floats printed as the shortest decimal that round-trips the float32/16 value."""
    array = np.asarray(array)
    if array.dtype not in (np.float16, np.float32):
        array = array.astype(np.float32)
    return array.astype(str).astype(np.float64).tolist()


def _decimate_indices(n: int, max_points: int) -> np.ndarray:
    if max_points <= 0 or n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(np.int64))


def _minmax_indices(values: np.ndarray, max_points: int) -> np.ndarray:
    """Indices keeping each bucket's first, min and max and the last point, so spikes survive decimation."""
    n = len(values)
    if max_points <= 0 or n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // 3)
    bounds = np.linspace(0, n, buckets + 1).astype(np.int64)
    keep = [0, n - 1]
    finite = np.where(np.isnan(values), np.inf, values)
    finite_neg = np.where(np.isnan(values), -np.inf, values)
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b <= a:
            continue
        keep += [a, a + int(np.argmin(finite[a:b])), a + int(np.argmax(finite_neg[a:b]))]
    return np.unique(np.asarray(keep, dtype=np.int64))


class _Series:
    """All kept steps of one tensor tag, stacked: ``steps [N]``, ``wall [N]``, ``values [N, ...]``."""

    __slots__ = ("signature", "steps", "wall", "values", "content", "_layer_means", "_range")

    def __init__(self, signature, steps, wall, values, content):
        self.signature = signature
        self.steps = steps
        self.wall = wall
        self.values = values
        self.content = content
        self._layer_means = None
        self._range = None

    def value_range(self) -> tuple:
        """(min, max) over the finite values of every step, or (None, None)."""
        if self._range is None:
            finite = self.values[np.isfinite(self.values)]
            self._range = (float(finite.min()), float(finite.max())) if finite.size else (None, None)
        return self._range

    @property
    def nbytes(self) -> int:
        return self.values.nbytes + self.steps.nbytes + self.wall.nbytes

    def index_of(self, step: int) -> int:
        i = int(np.searchsorted(self.steps, step))
        if i >= len(self.steps) or self.steps[i] != step:
            raise errors.NotFoundError("no step %d" % step)
        return i

    def index_at_or_before(self, step: int) -> int | None:
        i = int(np.searchsorted(self.steps, step, side="right")) - 1
        return i if i >= 0 else None

    def layer_means(self) -> np.ndarray:
        if self._layer_means is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                self._layer_means = np.nanmean(self.values, axis=2)
        return self._layer_means


class _LRU:
    """A small thread-safe LRU bounded by total bytes."""

    def __init__(self, max_bytes: int):
        self._max_bytes = max_bytes
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key, item, nbytes: int) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (item, nbytes)
            self._bytes += nbytes
            while self._bytes > self._max_bytes and len(self._items) > 1:
                _, (_, size) = self._items.popitem(last=False)
                self._bytes -= size


def _arg(request, name: str, required: bool = True):
    value = request.args.get(name)
    if value is None or value == "":
        if required:
            raise errors.InvalidArgumentError("missing query parameter %r" % name)
        return None
    return value


def _int_arg(request, name: str, required: bool = True, minimum: int | None = None):
    raw = _arg(request, name, required)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise errors.InvalidArgumentError("query parameter %r must be an integer" % name) from None
    if minimum is not None and value < minimum:
        raise errors.InvalidArgumentError("query parameter %r must be >= %d" % (name, minimum))
    return value


def _json(request, obj):
    return http_util.Respond(request, obj, "application/json")


class BertwatchPlugin(base_plugin.TBPlugin):
    """Heads, drift, attention maps, ablation, run comparison and head clusters for bertwatch logs."""

    plugin_name = md.PLUGIN_NAME

    def __init__(self, context):
        self._data_provider = context.data_provider
        self._series_cache = _LRU(max_bytes=512 * 1024 * 1024)
        self._attention_cache = _LRU(max_bytes=64 * 1024 * 1024)
        self._locks_guard = threading.Lock()
        self._locks: dict = {}
        self._static_cache: dict = {}

    # -- TBPlugin

    def get_plugin_apps(self):
        return {
            "/index.js": self._serve_index,
            "/static/*": self._serve_static,
            "/tags": self._serve_tags,
            "/steps": self._serve_steps,
            "/grid": self._serve_grid,
            "/trajectory": self._serve_trajectory,
            "/layer_means": self._serve_layer_means,
            "/labels": self._serve_labels,
            "/attention": self._serve_attention,
            "/ablation": self._serve_ablation,
            "/embedding": self._serve_embedding,
        }

    def is_active(self):
        return False  # enabled through data_provider.list_plugins when bertwatch data exists

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="BERT heads")

    # -- static files

    def _read_static(self, name: str) -> bytes:
        body = self._static_cache.get(name)
        if body is None:
            body = importlib.resources.files("bertwatch.tb").joinpath("static", name).read_bytes()
            self._static_cache[name] = body
        return body

    @wrappers.Request.application
    def _serve_index(self, request):
        return http_util.Respond(request, self._read_static("index.js"), "text/javascript")

    @wrappers.Request.application
    def _serve_static(self, request):
        prefix = "/data/plugin/%s/static/" % self.plugin_name
        path = request.path
        name = path[path.find(prefix) + len(prefix) :] if prefix in path else ""
        mime = STATIC_FILES.get(name)
        if mime is None:
            return http_util.Respond(request, "Not found", "text/plain", code=404)
        return http_util.Respond(request, self._read_static(name), mime)

    # -- data access helpers

    def _ctx(self, request):
        from tensorboard import plugin_util

        return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)

    def _require_provider(self):
        if self._data_provider is None:
            raise errors.NotFoundError("TensorBoard has no data provider")
        return self._data_provider

    def _list_tensor_meta(self, ctx, eid, run, tag):
        dp = self._require_provider()
        listing = dp.list_tensors(
            ctx,
            experiment_id=eid,
            plugin_name=self.plugin_name,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=[tag]),
        )
        ts = listing.get(run, {}).get(tag)
        if ts is None:
            raise errors.NotFoundError("no bertwatch tensor for run=%r tag=%r" % (run, tag))
        content = md.parse_plugin_content(ts.plugin_content)
        if content is None or content["version"] > md.FORMAT_VERSION:
            raise errors.NotFoundError("tag %r has no readable bertwatch metadata" % tag)
        return ts, content

    def _key_lock(self, key) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.Lock()
            return lock

    def _series(self, ctx, eid, run, tag, kind=None) -> _Series:
        """The stacked series of a tensor tag, re-read only when its max step / wall time changed."""
        ts, content = self._list_tensor_meta(ctx, eid, run, tag)
        if kind is not None and content["kind"] not in ((kind,) if isinstance(kind, str) else kind):
            raise errors.NotFoundError("tag %r is a %s, not a %s" % (tag, content["kind"], kind))
        signature = (ts.max_step, ts.max_wall_time, ts.plugin_content)
        key = (eid, run, tag)
        with self._key_lock(key):
            cached = self._series_cache.get(key)
            if cached is not None and cached[0].signature == signature:
                return cached[0]
            data = self._require_provider().read_tensors(
                ctx,
                experiment_id=eid,
                plugin_name=self.plugin_name,
                downsample=_DOWNSAMPLE,
                run_tag_filter=provider.RunTagFilter(runs=[run], tags=[tag]),
            )
            points = data.get(run, {}).get(tag) or []
            if not points:
                raise errors.NotFoundError("no data for run=%r tag=%r" % (run, tag))
            points = sorted(points, key=lambda d: d.step)
            shape = np.shape(points[-1].numpy)
            points = [d for d in points if np.shape(d.numpy) == shape]  # a shape change keeps the newest shape
            steps = np.fromiter((d.step for d in points), dtype=np.int64, count=len(points))
            if len(np.unique(steps)) != len(steps):  # a step logged twice (e.g. a resumed run): keep the last
                _, first_from_end = np.unique(steps[::-1], return_index=True)
                points = [points[len(points) - 1 - i] for i in first_from_end]
                steps = np.fromiter((d.step for d in points), dtype=np.int64, count=len(points))
            wall = np.fromiter((d.wall_time for d in points), dtype=np.float64, count=len(points))
            values = np.stack([np.asarray(d.numpy, dtype=np.float32) for d in points])
            series = _Series(signature, steps, wall, values, content)
            self._series_cache.put(key, series, series.nbytes)
            return series

    def _uncached_tags(self, eid, run, tags) -> list:
        """Those of ``tags`` never read into the cache (a stale entry is refreshed by :meth:`_series`)."""
        return [tag for tag in tags if self._series_cache.get((eid, run, tag)) is None]

    def _grid_series(self, ctx, eid, run, tag) -> _Series:
        series = self._series(ctx, eid, run, tag, kind=md.KIND_HEAD_GRID)
        if series.values.ndim != 3:
            raise errors.NotFoundError("tag %r is not a [layers, heads] grid" % tag)
        return series

    # -- routes

    @wrappers.Request.application
    def _serve_tags(self, request):
        ctx, eid = self._ctx(request)
        dp = self._data_provider
        runs: dict = {}
        skipped = []
        if dp is not None:
            listings = [
                dp.list_tensors(ctx, experiment_id=eid, plugin_name=self.plugin_name),
                dp.list_blob_sequences(ctx, experiment_id=eid, plugin_name=self.plugin_name),
            ]
            for listing, kinds in zip(listings, (md.TENSOR_KINDS, md.BLOB_KINDS)):
                for run, tags in listing.items():
                    for tag, ts in tags.items():
                        content = md.parse_plugin_content(ts.plugin_content)
                        if content is None:
                            skipped.append({"run": run, "tag": tag, "reason": "unreadable metadata"})
                            continue
                        if content["version"] > md.FORMAT_VERSION:
                            skipped.append({"run": run, "tag": tag, "reason": "written by a newer bertwatch format"})
                            continue
                        if content["kind"] not in kinds:
                            continue
                        info = {k: v for k, v in content.items() if k != "version"}
                        info.update(
                            maxStep=int(ts.max_step),
                            maxWallTime=float(ts.max_wall_time),
                            description=ts.description or "",
                        )
                        runs.setdefault(run, {})[tag] = info
        ordered = {run: dict(sorted(runs[run].items())) for run in sorted(runs)}
        return _json(request, {"version": md.FORMAT_VERSION, "runs": ordered, "skipped": skipped})

    @wrappers.Request.application
    def _serve_steps(self, request):
        ctx, eid = self._ctx(request)
        run, tag = _arg(request, "run"), _arg(request, "tag")
        if tag.startswith(md.ATTENTION_PREFIX):
            points, _ = self._blob_points(ctx, eid, run, tag)
            steps = [int(p.step) for p in points]
            wall = [float(p.wall_time) for p in points]
            extra = {}
        else:
            series = self._series(ctx, eid, run, tag)
            steps, wall = series.steps.tolist(), series.wall.tolist()
            lo, hi = series.value_range()
            extra = {"min": lo, "max": hi}
        return _json(request, {"run": run, "tag": tag, "steps": steps, "wallTimes": wall, **extra})

    @wrappers.Request.application
    def _serve_grid(self, request):
        ctx, eid = self._ctx(request)
        run, tag = _arg(request, "run"), _arg(request, "tag")
        step = _int_arg(request, "step", required=False)
        series = self._grid_series(ctx, eid, run, tag)
        i = len(series.steps) - 1 if step is None else series.index_of(step)
        layers, heads = series.values.shape[1:]
        return _json(
            request,
            {
                "run": run,
                "tag": tag,
                "stat": series.content.get("stat"),
                "step": int(series.steps[i]),
                "wallTime": float(series.wall[i]),
                "index": i,
                "numSteps": len(series.steps),
                "maxStep": int(series.steps[-1]),
                "layers": int(layers),
                "heads": int(heads),
                "values": _f32_list(series.values[i]),
            },
        )

    @wrappers.Request.application
    def _serve_trajectory(self, request):
        ctx, eid = self._ctx(request)
        run, tag = _arg(request, "run"), _arg(request, "tag")
        layer = _int_arg(request, "layer", minimum=0)
        head = _int_arg(request, "head", minimum=0)
        max_points = _int_arg(request, "max_points", required=False, minimum=0)
        series = self._grid_series(ctx, eid, run, tag)
        layers, heads = series.values.shape[1:]
        if layer >= layers or head >= heads:
            raise errors.NotFoundError("no head L%d H%d in a %d x %d grid" % (layer, head, layers, heads))
        values = series.values[:, layer, head]
        keep = _minmax_indices(values, _DEFAULT_MAX_POINTS if max_points is None else max_points)
        return _json(
            request,
            {
                "run": run,
                "tag": tag,
                "layer": layer,
                "head": head,
                "numSteps": len(series.steps),
                "steps": series.steps[keep].tolist(),
                "values": _f32_list(values[keep]),
            },
        )

    @wrappers.Request.application
    def _serve_layer_means(self, request):
        ctx, eid = self._ctx(request)
        run, tag = _arg(request, "run"), _arg(request, "tag")
        max_points = _int_arg(request, "max_points", required=False, minimum=0)
        series = self._grid_series(ctx, eid, run, tag)
        keep = _decimate_indices(len(series.steps), _DEFAULT_MAX_POINTS if max_points is None else max_points)
        means = series.layer_means()[keep]  # [n, layers]
        return _json(
            request,
            {
                "run": run,
                "tag": tag,
                "numSteps": len(series.steps),
                "steps": series.steps[keep].tolist(),
                "means": _f32_list(means.T),  # [layers][n]
            },
        )

    @wrappers.Request.application
    def _serve_labels(self, request):
        ctx, eid = self._ctx(request)
        run = _arg(request, "run")
        step = _int_arg(request, "step", required=False)
        grids, used = {}, {}
        stats = list(dict.fromkeys(rule[0] for rule in LABEL_RULES))

        def load(stat):
            try:
                return self._grid_series(ctx, eid, run, md.heads_tag(stat))
            except errors.NotFoundError:
                return None

        # Six series: those never read yet are read concurrently (a first read of a long series mostly
        # waits on the data server); cached ones cost one cheap listing each.
        cold = self._uncached_tags(eid, run, [md.heads_tag(stat) for stat in stats])
        if len(cold) > 1:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(cold)) as pool:
                list(pool.map(load, [tag[len(md.HEADS_PREFIX) :] for tag in cold]))
        for stat in stats:
            series = load(stat)
            if series is None:
                used[stat] = None
                continue
            i = len(series.steps) - 1 if step is None else series.index_at_or_before(step)
            if i is None:
                used[stat] = None
                continue
            grids[stat] = series.values[i]
            used[stat] = int(series.steps[i])
        labels = behaviour_labels(grids).tolist() if grids else None
        return _json(
            request,
            {
                "run": run,
                "step": step,
                "labels": labels,
                "stepsUsed": used,
                "rules": [{"stat": s, "label": lab, "threshold": t} for s, lab, t in LABEL_RULES],
            },
        )

    def _blob_points(self, ctx, eid, run, tag):
        dp = self._require_provider()
        listing = dp.list_blob_sequences(
            ctx,
            experiment_id=eid,
            plugin_name=self.plugin_name,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=[tag]),
        )
        ts = listing.get(run, {}).get(tag)
        content = md.parse_plugin_content(ts.plugin_content) if ts is not None else None
        if content is None or content["version"] > md.FORMAT_VERSION or content["kind"] != md.KIND_ATTENTION:
            raise errors.NotFoundError("no bertwatch attention maps for run=%r tag=%r" % (run, tag))
        data = dp.read_blob_sequences(
            ctx,
            experiment_id=eid,
            plugin_name=self.plugin_name,
            downsample=_DOWNSAMPLE,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=[tag]),
        )
        points = sorted(data.get(run, {}).get(tag) or [], key=lambda d: d.step)
        if not points:
            raise errors.NotFoundError("no data for run=%r tag=%r" % (run, tag))
        return points, content

    def _attention(self, ctx, eid, run, tag, step):
        points, content = self._blob_points(ctx, eid, run, tag)
        if step is None:
            point = points[-1]
        else:
            point = next((p for p in points if p.step == step), None)
            if point is None:
                raise errors.NotFoundError("no attention maps at step %d" % step)
        key = (eid, run, tag, int(point.step), float(point.wall_time))
        cached = self._attention_cache.get(key)
        if cached is not None:
            return cached[0]
        if len(point.values) < 2:
            raise errors.NotFoundError("malformed attention blob sequence")
        dp = self._require_provider()
        header_bytes = dp.read_blob(ctx, blob_key=point.values[0].blob_key)
        maps_bytes = dp.read_blob(ctx, blob_key=point.values[1].blob_key)
        try:
            header = json.loads(header_bytes.decode("utf-8"))
            layers, heads, length = int(header["layers"]), int(header["heads"]), int(header["length"])
            tokens = [str(t) for t in header["tokens"]]
            maps = np.frombuffer(maps_bytes, dtype="<f2").reshape(layers, heads, length, length)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise errors.NotFoundError("malformed attention blob: %s" % e) from None
        if len(tokens) != length:
            raise errors.NotFoundError("malformed attention blob: %d tokens, length %d" % (len(tokens), length))
        segments = header.get("segments")
        result = (int(point.step), float(point.wall_time), content.get("index"), tokens, segments, maps)
        self._attention_cache.put(key, result, maps.nbytes + len(header_bytes))
        return result

    @wrappers.Request.application
    def _serve_attention(self, request):
        ctx, eid = self._ctx(request)
        run, tag = _arg(request, "run"), _arg(request, "tag")
        step = _int_arg(request, "step", required=False)
        layer = _int_arg(request, "layer", required=False, minimum=0) or 0
        head = _int_arg(request, "head", required=False, minimum=0)
        step, wall, index, tokens, segments, maps = self._attention(ctx, eid, run, tag, step)
        layers, heads, length = maps.shape[0], maps.shape[1], maps.shape[2]
        if layer >= layers or (head is not None and head >= heads):
            raise errors.NotFoundError("no such layer/head in a %d x %d model" % (layers, heads))
        selected = maps[layer] if head is None else maps[layer, head]
        if selected.size > _MAX_JSON_VALUES:
            raise errors.InvalidArgumentError("%d values are too many for one response: pass head=" % selected.size)
        return _json(
            request,
            {
                "run": run,
                "tag": tag,
                "step": step,
                "wallTime": wall,
                "index": index,
                "tokens": tokens,
                "segments": segments,
                "layers": layers,
                "heads": heads,
                "length": length,
                "layer": layer,
                "head": head,
                "maps": _f32_list(selected),  # [heads][T][T], or [T][T] when head is given
            },
        )

    def _latest(self, ctx, eid, run, tag, kind):
        series = self._series(ctx, eid, run, tag, kind=kind)
        return series, series.values[-1], int(series.steps[-1])

    @wrappers.Request.application
    def _serve_ablation(self, request):
        ctx, eid = self._ctx(request)
        run = _arg(request, "run")
        mode = _arg(request, "mode", required=False)
        listing = self._require_provider().list_tensors(
            ctx, experiment_id=eid, plugin_name=self.plugin_name, run_tag_filter=provider.RunTagFilter(runs=[run])
        )
        modes = sorted(
            {
                tag[len(md.ABLATION_PREFIX) :].rsplit("/", 1)[0]
                for tag in listing.get(run, {})
                if tag.startswith(md.ABLATION_PREFIX) and tag.endswith("/heads")
            }
        )
        if not modes:
            raise errors.NotFoundError("no ablation results in run %r" % run)
        if mode is None:
            mode = modes[0]
        if mode not in modes:
            raise errors.NotFoundError("no ablation mode %r in run %r" % (mode, run))
        hs, heads, step = self._latest(ctx, eid, run, md.ablation_tag(mode, "heads"), md.KIND_ABLATION_HEADS)
        _, layers_table, _ = self._latest(ctx, eid, run, md.ablation_tag(mode, "layers"), md.KIND_ABLATION_LAYERS)
        pruning = None
        if md.ablation_tag(mode, "pruning") in listing.get(run, {}):
            _, curve, _ = self._latest(ctx, eid, run, md.ablation_tag(mode, "pruning"), md.KIND_PRUNING)
            pruning = _f32_list(curve)
        content = hs.content
        return _json(
            request,
            {
                "run": run,
                "mode": mode,
                "modes": modes,
                "step": step,
                "metric": content.get("metric"),
                "baseline": content.get("baseline"),
                "numExamples": content.get("num_examples"),
                "fields": content.get("fields", list(md.ABLATION_FIELDS)),
                "heads": _f32_list(heads),
                "layers": _f32_list(layers_table),
                "pruning": pruning,
            },
        )

    @wrappers.Request.application
    def _serve_embedding(self, request):
        ctx, eid = self._ctx(request)
        run, tag = _arg(request, "run"), _arg(request, "tag")
        series, coords, step = self._latest(ctx, eid, run, tag, md.KIND_EMBEDDING)
        layers = int(series.content.get("layers", 0))
        heads = int(series.content.get("heads", 0))
        if coords.ndim != 2 or coords.shape[1] != 2 or coords.shape[0] != layers * heads:
            raise errors.NotFoundError("malformed head embedding %r" % tag)
        return _json(
            request,
            {
                "run": run,
                "tag": tag,
                "step": step,
                "name": series.content.get("name"),
                "layers": layers,
                "heads": heads,
                "coords": _f32_list(coords),
            },
        )

"""What the bertwatch TensorBoard plugin's routes compute: reads through ``context.data_provider``, caching,
decimation and the JSON bodies. Request parsing and the route table live in :mod:`bertwatch.tb.plugin`.

Imports only tensorboard and numpy (TensorBoard imports the plugin, and so this module, at start-up).
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import threading

import numpy as np
from tensorboard import errors
from tensorboard.data import provider

from bertwatch.core import rules
from bertwatch.core.alerts import QUANTITY_STATS, RULE_TEXTS, episodes
from bertwatch.core.stat_names import stat_names_json
from bertwatch.tb.series import LRU, Series, decimate_indices, f32_list, minmax_indices
from bertwatch.tb.views.ablation.ablation_route import ablation_about, ablation_words, pruning_curves, q_values
from bertwatch.tb.writer import metadata as md

__all__ = ["Queries", "ablation_about", "label_rules", "pruning_curves"]

DOWNSAMPLE = 1_000_000_000  # "everything the loader kept"; the real limit is --samples_per_plugin
MAX_JSON_VALUES = 2_000_000  # cap on the numbers one response may carry
DEFAULT_MAX_POINTS = 1000


class Queries:
    """The routes' implementations over one data provider; thread-safe, with byte-bounded caches."""

    def __init__(self, data_provider, plugin_name: str = md.PLUGIN_NAME):
        self.data_provider = data_provider
        self.plugin_name = plugin_name
        self.series_cache = LRU(max_bytes=512 * 1024 * 1024)
        self.attention_cache = LRU(max_bytes=64 * 1024 * 1024)
        self._locks_guard = threading.Lock()
        self._locks: dict = {}

    # -- data access

    def require_provider(self):
        if self.data_provider is None:
            raise errors.NotFoundError("TensorBoard has no data provider")
        return self.data_provider

    def _one_tag(self, call, ctx, eid, run, tag, **options):
        """What the data provider's ``call`` (``list_tensors``, ``read_blob_sequences``, ...) answers for one run and
        tag of this plugin, or None."""
        one = provider.RunTagFilter(runs=[run], tags=[tag])
        found = call(ctx, experiment_id=eid, plugin_name=self.plugin_name, run_tag_filter=one, **options)
        return found.get(run, {}).get(tag)

    def run_tensors(self, ctx, eid, run, tags=None) -> dict:
        """``{tag: TensorTimeSeries}`` of a run's tensor tags (only ``tags`` when given), from one provider call."""
        listing = self.require_provider().list_tensors(
            ctx, experiment_id=eid, plugin_name=self.plugin_name, run_tag_filter=provider.RunTagFilter([run], tags)
        )
        return listing.get(run, {})

    def tensor_meta(self, ctx, eid, run, tag, listing=None):
        """The listing entry and parsed metadata of one tensor tag (NotFoundError when absent or unreadable); the
        entry comes from ``listing`` (a :meth:`run_tensors` answer) when given, else from a provider call."""
        if listing is None:
            listing = {tag: self._one_tag(self.require_provider().list_tensors, ctx, eid, run, tag)}
        ts = listing.get(tag)
        if ts is None:
            raise errors.NotFoundError("no bertwatch tensor for run=%r tag=%r" % (run, tag))
        content = md.parse_plugin_content(ts.plugin_content)
        if content is None or content["version"] > md.READ_VERSION:
            raise errors.NotFoundError("tag %r has no readable bertwatch metadata" % tag)
        return ts, content

    def _key_lock(self, key) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.Lock()
            return lock

    def cached(self, eid, run, tag, ts, latest_only=False) -> Series | None:
        """The cached series of a tag if current as ``ts``, its listing entry, says (``latest_only``: or its latest step)."""
        for key in [(eid, run, tag)] + ([(eid, run, tag, "latest")] if latest_only else []):
            found = self.series_cache.get(key)
            if found is not None and found[0].signature == (ts.max_step, ts.max_wall_time, ts.plugin_content):
                return found[0]
        return None

    def series(self, ctx, eid, run, tag, kind=None, listing=None, latest_only=False) -> Series:
        """The stacked series of a tensor tag, re-read only when its max step / wall time changed. With
        ``latest_only`` its latest step is enough: unless the whole series is cached, only that step is read (a
        provider's downsampling keeps the latest datum), and cached apart."""
        ts, content = self.tensor_meta(ctx, eid, run, tag, listing)
        if kind is not None and content["kind"] not in ((kind,) if isinstance(kind, str) else kind):
            raise errors.NotFoundError("tag %r is a %s, not a %s" % (tag, content["kind"], kind))
        with self._key_lock((eid, run, tag)):
            series = self.cached(eid, run, tag, ts, latest_only)
            if series is not None:
                return series
            read = functools.partial(self._one_tag, self.require_provider().read_tensors, ctx, eid, run, tag)
            points = read(downsample=1) if latest_only else None
            key = (eid, run, tag, "latest")
            if not points or points[-1].step != ts.max_step:  # the whole series
                points, key = read(downsample=DOWNSAMPLE), (eid, run, tag)
            if not points:
                raise errors.NotFoundError("no data for run=%r tag=%r" % (run, tag))
            series = Series.from_points((ts.max_step, ts.max_wall_time, ts.plugin_content), points, content)
            self.series_cache.put(key, series, series.nbytes)
            return series

    def grid_series(self, ctx, eid, run, tag, listing=None, latest_only=False) -> Series:
        series = self.series(ctx, eid, run, tag, kind=md.KIND_HEAD_GRID, listing=listing, latest_only=latest_only)
        if series.values.ndim != 3:
            raise errors.NotFoundError("tag %r is not a [layers, heads] grid" % tag)
        return series

    def latest(self, ctx, eid, run, tag, kind, listing=None):
        series = self.series(ctx, eid, run, tag, kind=kind, listing=listing)
        return series, series.values[-1], int(series.steps[-1])

    # -- route bodies

    def tags(self, ctx, eid) -> dict:
        dp = self.data_provider
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
                        if content["version"] > md.READ_VERSION:
                            skipped.append({"run": run, "tag": tag, "reason": "written by a newer bertwatch format"})
                            continue
                        if content["kind"] not in kinds:
                            continue
                        info = {k: v for k, v in content.items() if k != "version"}
                        if "probe" in info:
                            info["probe"] = md.probe_info(info["probe"])
                        info.update(
                            maxStep=int(ts.max_step),
                            maxWallTime=float(ts.max_wall_time),
                            description=ts.description or "",
                        )
                        runs.setdefault(run, {})[tag] = info
        ordered = {run: dict(sorted(runs[run].items())) for run in sorted(runs)}
        return {"version": md.READ_VERSION, "runs": ordered, "skipped": skipped}

    def steps(self, ctx, eid, run, tag) -> dict:
        if tag.startswith(md.ATTENTION_PREFIX):
            points, _ = self.blob_points(ctx, eid, run, tag)
            steps = [int(p.step) for p in points]
            wall = [float(p.wall_time) for p in points]
            extra = {}
        else:
            series = self.series(ctx, eid, run, tag)
            steps, wall = series.steps.tolist(), series.wall.tolist()
            lo, hi = series.value_range()
            extra = {"min": lo, "max": hi}
        return {"run": run, "tag": tag, "steps": steps, "wallTimes": wall, **extra}

    def grid(self, ctx, eid, run, tag, step) -> dict:
        series = self.grid_series(ctx, eid, run, tag)
        i = len(series.steps) - 1 if step is None else series.index_of(step)
        layers, heads = series.values.shape[1:]
        return {
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
            "probe": md.probe_info(series.content.get("probe")),
            "values": f32_list(series.values[i]),
        }

    def trajectory(self, ctx, eid, run, tag, layer, head, max_points) -> dict:
        series = self.grid_series(ctx, eid, run, tag)
        layers, heads = series.values.shape[1:]
        if layer >= layers or head >= heads:
            raise errors.NotFoundError("no head L%d H%d in a %d x %d grid" % (layer, head, layers, heads))
        values = series.values[:, layer, head]
        keep = minmax_indices(values, DEFAULT_MAX_POINTS if max_points is None else max_points)
        return {
            "run": run,
            "tag": tag,
            "layer": layer,
            "head": head,
            "numSteps": len(series.steps),
            "steps": series.steps[keep].tolist(),
            "values": f32_list(values[keep]),
        }

    def layer_means(self, ctx, eid, run, tag, max_points) -> dict:
        series = self.grid_series(ctx, eid, run, tag)
        keep = decimate_indices(len(series.steps), DEFAULT_MAX_POINTS if max_points is None else max_points)
        means = series.layer_means()[keep]  # [n, layers]
        return {
            "run": run,
            "tag": tag,
            "numSteps": len(series.steps),
            "steps": series.steps[keep].tolist(),
            "means": f32_list(means.T),  # [layers][n]
        }

    def named_values(self, ctx, eid, run, tag, max_points) -> dict:
        """A ``named_values`` series (e.g. the pattern-class shares) over steps: ``values`` is ``[names][steps]``."""
        series = self.series(ctx, eid, run, tag, kind=md.KIND_NAMED_VALUES)
        names = [str(n) for n in series.content.get("names", [])]
        if series.values.ndim != 2 or series.values.shape[1] != len(names):
            raise errors.NotFoundError("malformed series %r" % tag)
        keep = decimate_indices(len(series.steps), DEFAULT_MAX_POINTS if max_points is None else max_points)
        return {
            "run": run,
            "tag": tag,
            "name": series.content.get("name"),
            "names": names,
            "numSteps": len(series.steps),
            "steps": series.steps[keep].tolist(),
            "values": f32_list(series.values[keep].T),
        }

    def alerts(self, ctx, eid, run) -> dict:
        """The run's stability alert episodes (``core.alerts.episodes``), the rules, each rule's quantity and text,
        and the head statistics each quantity sums."""
        series = self.series(ctx, eid, run, md.ALERTS_TAG, kind=md.KIND_ALERTS)
        content, rule_names = series.content, [str(r) for r in series.content.get("rules", [])]
        if series.values.ndim != 5 or series.values.shape[3] != len(rule_names):
            raise errors.NotFoundError("malformed alerts of run %r" % run)
        return {
            "run": run,
            "rules": rule_names,
            "quantities": content.get("quantities", {}),
            "quantityStats": {q: list(stats) for q, stats in QUANTITY_STATS.items()},
            "ruleTexts": dict(RULE_TEXTS),
            "referenceStep": content.get("reference_step"),
            "steps": series.steps.tolist(),
            "episodes": episodes(series.steps.tolist(), series.values, rule_names),
        }

    def grids_at(self, ctx, eid, run, stats, step, listing=None) -> dict:
        """``{stat: (step, [layers, heads] grid)}``: heads grids of a run, each at its last step at or before ``step``
        (the latest when None); a grid the run lacks, or without such a step, is left out. Each tag is listed once
        (``listing``: as in :meth:`tensor_meta`); a grid wanted at its latest step is read alone, not its whole
        series. Latest steps are read side by side (each mostly waits on the data server), whole series one after
        another (each mostly converts data points, holding the GIL: side by side they hold up other requests)."""
        entries = {}
        for stat in stats:
            try:
                entries[stat] = self.tensor_meta(ctx, eid, run, md.heads_tag(stat), listing)[0]
            except errors.NotFoundError:
                continue
        latest = {stat: step is None or step >= ts.max_step for stat, ts in entries.items()}

        def pick(stat):
            tag = md.heads_tag(stat)
            try:
                series = self.grid_series(ctx, eid, run, tag, {tag: entries[stat]}, latest[stat])
            except errors.NotFoundError:
                return None
            i = len(series.steps) - 1 if step is None else series.index_at_or_before(step)
            return None if i is None else (int(series.steps[i]), series.values[i])

        to_read = [s for s, ts in entries.items() if latest[s] and not self.cached(eid, run, md.heads_tag(s), ts, True)]
        picked = {}
        if len(to_read) > 1:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(to_read)) as pool:
                picked = dict(zip(to_read, pool.map(pick, to_read)))
        found = {stat: picked[stat] if stat in picked else pick(stat) for stat in entries}
        return {stat: at for stat, at in found.items() if at is not None}

    def stat_names(self, ctx, eid) -> dict:
        """Every statistic's name and menu group (``bertwatch.core.stat_names``); the same for every experiment."""
        return stat_names_json()

    def labels(self, ctx, eid, run, step) -> dict:
        """Clark's labels of the step at or before ``step`` (latest by default), with the rules they follow;
        without ``run``, only the rules."""
        body = {"run": run, "step": step, "labels": None, "stepsUsed": {}, **label_rules()}
        if run is None:
            return body
        stats = list(dict.fromkeys(rule.stat for rule in rules.BEHAVIOUR_RULES))
        found = self.grids_at(ctx, eid, run, stats, step)
        grids = {stat: grid for stat, (_, grid) in found.items()}
        body["labels"] = rules.behaviour_labels(grids).tolist() if grids else None
        body["stepsUsed"] = {stat: found[stat][0] if stat in found else None for stat in stats}
        return body

    def blob_points(self, ctx, eid, run, tag):
        dp = self.require_provider()
        ts = self._one_tag(dp.list_blob_sequences, ctx, eid, run, tag)
        content = md.parse_plugin_content(ts.plugin_content) if ts is not None else None
        if content is None or content["version"] > md.READ_VERSION or content["kind"] != md.KIND_ATTENTION:
            raise errors.NotFoundError("no bertwatch attention maps for run=%r tag=%r" % (run, tag))
        points = sorted(
            self._one_tag(dp.read_blob_sequences, ctx, eid, run, tag, downsample=DOWNSAMPLE) or [], key=lambda d: d.step
        )
        if not points:
            raise errors.NotFoundError("no data for run=%r tag=%r" % (run, tag))
        return points, content

    def attention_maps(self, ctx, eid, run, tag, step):
        points, content = self.blob_points(ctx, eid, run, tag)
        if step is None:
            point = points[-1]
        else:
            point = next((p for p in points if p.step == step), None)
            if point is None:
                raise errors.NotFoundError("no attention maps at step %d" % step)
        key = (eid, run, tag, int(point.step), float(point.wall_time))
        cached = self.attention_cache.get(key)
        if cached is not None:
            return cached[0]
        if len(point.values) < 2:
            raise errors.NotFoundError("malformed attention blob sequence")
        dp = self.require_provider()
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
        about = {"measure": md.attention_measure(content), "unit": "layer" if header.get("unit") == "layer" else "head"}
        result = (int(point.step), float(point.wall_time), content.get("index"), tokens, segments, maps, about)
        self.attention_cache.put(key, result, maps.nbytes + len(header_bytes))
        return result

    def attention(self, ctx, eid, run, tag, step, layer, head) -> dict:
        step, wall, index, tokens, segments, maps, about = self.attention_maps(ctx, eid, run, tag, step)
        layers, heads, length = maps.shape[0], maps.shape[1], maps.shape[2]
        if layer >= layers or (head is not None and head >= heads):
            raise errors.NotFoundError("no such layer/head in a %d x %d model" % (layers, heads))
        selected = maps[layer] if head is None else maps[layer, head]
        if selected.size > MAX_JSON_VALUES:
            raise errors.InvalidArgumentError("%d values are too many for one response: pass head=" % selected.size)
        return {
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
            **about,  # measure, unit ("layer": heads is 1, the map of the whole layer)
            "maps": f32_list(selected),  # [heads][T][T], or [T][T] when head is given
        }

    def ablation(self, ctx, eid, run, mode) -> dict:
        listing = self.run_tensors(ctx, eid, run)  # one provider call; each table's entry comes from it
        modes = sorted(
            {
                tag[len(md.ABLATION_PREFIX) :].rsplit("/", 1)[0]
                for tag in listing
                if tag.startswith(md.ABLATION_PREFIX) and tag.endswith("/heads")
            }
        )
        if not modes:
            raise errors.NotFoundError("no ablation results in run %r" % run)
        if mode is None:
            mode = modes[0]
        if mode not in modes:
            raise errors.NotFoundError("no ablation mode %r in run %r" % (mode, run))
        tag = functools.partial(md.ablation_tag, mode)
        hs, heads, step = self.latest(ctx, eid, run, tag("heads"), md.KIND_ABLATION_HEADS, listing)
        _, layers_table, _ = self.latest(ctx, eid, run, tag("layers"), md.KIND_ABLATION_LAYERS, listing)
        pruning = None
        if tag("pruning") in listing:
            pruning = f32_list(self.latest(ctx, eid, run, tag("pruning"), md.KIND_PRUNING, listing)[1])
        curves = None
        if tag("pruning_curves") in listing:
            cs, table, _ = self.latest(ctx, eid, run, tag("pruning_curves"), md.KIND_PRUNING_CURVES, listing)
            curves = pruning_curves(cs.content, table)
        content = hs.content
        words = ablation_words(content, cs.content if curves is not None else None)
        fields = content.get("fields", list(md.ABLATION_FIELDS))
        about = ablation_about(content)
        return {
            "run": run,
            "mode": mode,
            "modes": modes,
            "step": step,
            **about,
            "metric": content.get("metric"),
            "baseline": content.get("baseline"),
            "numExamples": content.get("num_examples"),
            "fields": fields,
            "heads": f32_list(heads),
            "layers": f32_list(layers_table),
            "headsQ": q_values(heads, fields),
            "layersQ": q_values(layers_table, fields),
            "pruning": pruning,
            "curves": curves,
            **words,  # greaterIsBetter, resolution, headline, answers: the texts of bertwatch.core.removable
        }

    def embedding(self, ctx, eid, run, tag, step=None) -> dict:
        """The head map at ``step`` (latest by default), the logged steps, and the map of the step before
        (``previous``, None at the first), so the view can show where each head came from."""
        series = self.series(ctx, eid, run, tag, kind=md.KIND_EMBEDDING)
        i = len(series.steps) - 1 if step is None else series.index_of(step)
        coords = series.values[i]
        layers = int(series.content.get("layers", 0))
        heads = int(series.content.get("heads", 0))
        if coords.ndim != 2 or coords.shape[1] != 2 or coords.shape[0] != layers * heads:
            raise errors.NotFoundError("malformed head embedding %r" % tag)
        return {
            "run": run,
            "tag": tag,
            "step": int(series.steps[i]),
            "steps": series.steps.tolist(),
            "name": series.content.get("name"),
            "layers": layers,
            "heads": heads,
            "coords": f32_list(coords),
            "previous": f32_list(series.values[i - 1]) if i > 0 else None,
        }


def label_rules() -> dict:
    """The labelling rules as the frontend uses them: ``rules`` (behaviour, precedence order) and ``patterns``."""
    served = rules.rules_json()
    return {"rules": served["behaviour"], "patterns": served["patterns"]}

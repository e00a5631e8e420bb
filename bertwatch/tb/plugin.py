"""The bertwatch TensorBoard plugin: the route table and WSGI glue; :mod:`bertwatch.tb.queries` computes the bodies.

Imports only tensorboard, werkzeug and numpy (TensorBoard imports this module at start-up).

Routes, mounted at ``data/plugin/bertwatch``; ``run``/``tag`` are opaque names used only in a ``RunTagFilter``:

=====================================================  ========================================================
``/index.js``, ``/static/<file>``                      the frontend (allow-listed files only)
``/tags``                                              runs and their bertwatch tags with kind, metadata, maxStep
``/steps?run&tag``                                     the logged steps (and wall times) of one tag
``/grid?run&tag[&step]``                               one ``[layers, heads]`` grid (default: latest step)
``/trajectory?run&tag&layer&head[&max_points]``        one head's value over steps
``/layer_means?run&tag[&max_points]``                  each layer's mean over heads, over steps
``/labels[?run[&step]]``                               the label rules; with ``run``, Clark's labels of that step
``/stat_names``                                        statistic names: menu groups, drift and [0, 1] statistics
``/attention?run&tag[&step]&layer[&head]``             tokens and the maps of one layer (or one head), their measure
``/attention_measures?run&index``                      the measures logged for one probe example, with their steps
``/mass_gap?run[&step]``                               [CLS]/[SEP] mass per layer by weight, norm and ALTI, the gaps
``/ablation?run[&mode]``                               ablation tables of one mode and the pruning curve
``/embedding?run&tag[&step]``                          2-D head embedding of a step (latest), its steps, the previous map
``/series?run&tag[&max_points]``                       named values over steps (e.g. pattern-class shares)
``/alerts?run``                                          the run's stability alert episodes (head, rule, since)
``/verdict?run``                                       the run's verdict at each judged step, now, its health signals
``/outliers?run[&step]``                               each layer's largest activation over steps against its first
                                                       value, and its outlier statistics and [SEP] mass at a step
=====================================================  ========================================================

Numbers are JSON numbers; NaN and infinities arrive as the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"`` (TensorBoard's ``json_util.Cleanse``).
"""

from __future__ import annotations

import functools
import importlib.resources

from tensorboard import errors
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from bertwatch.tb.queries import Queries
from bertwatch.tb.views.heads import layer_outliers, measures, run_verdict
from bertwatch.tb.views.runs import runs_route
from bertwatch.tb.writer import metadata as md

#: The only files ``/static/*`` serves (name -> MIME type; where each lives: :func:`frontend_path`); nothing else is
#: ever read from disk.
STATIC_FILES = {
    "alert_strip.js": "text/javascript",
    "api.js": "text/javascript",
    "charts.js": "text/javascript",
    "colours.json": "application/json",
    "dom.js": "text/javascript",
    "heatmap.js": "text/javascript",
    "live.js": "text/javascript",
    "panel_mass_gap.js": "text/javascript",
    "panel_outliers.js": "text/javascript",
    "scales.js": "text/javascript",
    "step_card.js": "text/javascript",
    "view_ablation.js": "text/javascript",
    "view_attention.js": "text/javascript",
    "view_clusters.js": "text/javascript",
    "view_compare.js": "text/javascript",
    "view_drift.js": "text/javascript",
    "view_heads.js": "text/javascript",
    "view_runs.js": "text/javascript",
    "verdict_strip.js": "text/javascript",
    "style.css": "text/css",
}

#: Where each frontend file lives under ``bertwatch/tb``: a view's own modules in its folder (``views/<view>/``), the
#: entry module and the modules every view shares in ``static/``. The URL is flat wherever the file lives,
#: ``/static/<file>``, so the ES modules import one another as ``./<file>`` and a file name is unique in the frontend.
FRONTEND_HOMES = {
    "view_ablation.js": "views/ablation",
    "view_attention.js": "views/attention",
    "view_clusters.js": "views/clusters",
    "view_compare.js": "views/compare",
    "view_drift.js": "views/drift",
    "view_heads.js": "views/heads",
    "alert_strip.js": "views/heads",
    "panel_mass_gap.js": "views/heads",
    "panel_outliers.js": "views/heads",
    "verdict_strip.js": "views/heads",
    "view_runs.js": "views/runs",
}


def frontend_path(name: str) -> str:
    """The path under ``bertwatch/tb`` of the frontend file served as ``/static/<name>`` (or ``/index.js``)."""
    return f"{FRONTEND_HOMES.get(name, 'static')}/{name}"


def arg(request, name: str, required: bool = True):
    """A query parameter (InvalidArgumentError, a 400, when required and missing)."""
    value = request.args.get(name)
    if value is None or value == "":
        if required:
            raise errors.InvalidArgumentError("missing query parameter %r" % name)
        return None
    return value


def int_arg(request, name: str, required: bool = True, minimum: int | None = None):
    """An integer query parameter, checked against ``minimum``."""
    raw = arg(request, name, required)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise errors.InvalidArgumentError("query parameter %r must be an integer" % name) from None
    if minimum is not None and value < minimum:
        raise errors.InvalidArgumentError("query parameter %r must be >= %d" % (name, minimum))
    return value


def json_route(parse):
    """A WSGI app answering ``queries_method(ctx, eid, *parse(request))`` as JSON."""

    def wrap(method):
        @functools.wraps(method)
        @wrappers.Request.application
        def app(self, request):
            from tensorboard import plugin_util

            ctx, eid = plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)
            return http_util.Respond(request, method(self)(ctx, eid, *parse(request)), "application/json")

        return app

    return wrap


def _run_tag(request):
    return arg(request, "run"), arg(request, "tag")


class BertwatchPlugin(base_plugin.TBPlugin):
    """Heads, drift, attention maps, ablation, run comparison and head clusters for bertwatch logs."""

    plugin_name = md.PLUGIN_NAME

    def __init__(self, context):
        self.queries = Queries(context.data_provider, self.plugin_name)
        self._static_cache: dict = {}

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
            "/stat_names": self._serve_stat_names,
            "/attention": self._serve_attention,
            "/attention_measures": self._serve_attention_measures,
            "/mass_gap": self._serve_mass_gap,
            "/ablation": self._serve_ablation,
            "/embedding": self._serve_embedding,
            "/series": self._serve_series,
            "/alerts": self._serve_alerts,
            "/verdict": self._serve_verdict,
            "/runs": self._serve_runs,
            "/outliers": self._serve_outliers,
        }

    def is_active(self):
        return False  # enabled through data_provider.list_plugins when bertwatch data exists

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="BERT heads")

    # -- static files

    def _read_static(self, name: str) -> bytes:
        body = self._static_cache.get(name)
        if body is None:
            body = importlib.resources.files("bertwatch.tb").joinpath(*frontend_path(name).split("/")).read_bytes()
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

    # -- JSON routes: parameters here, bodies in Queries

    @json_route(lambda r: ())
    def _serve_tags(self):
        return self.queries.tags

    @json_route(_run_tag)
    def _serve_steps(self):
        return self.queries.steps

    @json_route(lambda r: (*_run_tag(r), int_arg(r, "step", required=False)))
    def _serve_grid(self):
        return self.queries.grid

    @json_route(
        lambda r: (
            *_run_tag(r),
            int_arg(r, "layer", minimum=0),
            int_arg(r, "head", minimum=0),
            int_arg(r, "max_points", required=False, minimum=0),
        )
    )
    def _serve_trajectory(self):
        return self.queries.trajectory

    @json_route(lambda r: (*_run_tag(r), int_arg(r, "max_points", required=False, minimum=0)))
    def _serve_layer_means(self):
        return self.queries.layer_means

    @json_route(lambda r: ())
    def _serve_stat_names(self):
        return self.queries.stat_names

    @json_route(lambda r: (arg(r, "run", required=False), int_arg(r, "step", required=False)))
    def _serve_labels(self):
        return self.queries.labels

    @json_route(
        lambda r: (
            *_run_tag(r),
            int_arg(r, "step", required=False),
            int_arg(r, "layer", required=False, minimum=0) or 0,
            int_arg(r, "head", required=False, minimum=0),
        )
    )
    def _serve_attention(self):
        return self.queries.attention

    @json_route(lambda r: (arg(r, "run"), int_arg(r, "index", minimum=0)))
    def _serve_attention_measures(self):
        return functools.partial(measures.attention_measures, self.queries)

    @json_route(lambda r: (arg(r, "run"), int_arg(r, "step", required=False)))
    def _serve_mass_gap(self):
        return functools.partial(measures.mass_gap, self.queries)

    @json_route(lambda r: (arg(r, "run"), arg(r, "mode", required=False)))
    def _serve_ablation(self):
        return self.queries.ablation

    @json_route(lambda r: (*_run_tag(r), int_arg(r, "step", required=False)))
    def _serve_embedding(self):
        return self.queries.embedding

    @json_route(lambda r: (*_run_tag(r), int_arg(r, "max_points", required=False, minimum=0)))
    def _serve_series(self):
        return self.queries.named_values

    @json_route(lambda r: (arg(r, "run"),))
    def _serve_alerts(self):
        return self.queries.alerts

    @json_route(lambda r: (arg(r, "run"),))
    def _serve_verdict(self):
        return functools.partial(run_verdict.run_verdict, self.queries)

    @json_route(lambda r: ())
    def _serve_runs(self):
        return functools.partial(runs_route.runs_table, self.queries)

    @json_route(lambda r: (arg(r, "run"), int_arg(r, "step", required=False)))
    def _serve_outliers(self):
        return functools.partial(layer_outliers.outlier_panel, self.queries)

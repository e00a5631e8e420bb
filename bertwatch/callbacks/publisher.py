"""The one place the probe pass's results are written: event files (world process zero) and the trackers.

Measurements and riders return values: grids, attention maps and ``RiderOutput`` records (a named-values series,
lines of text, a head embedding); the ``Publisher`` writes them with the run's ``tb.writer.summary.SummaryWriter`` and
sends the layer means (and the stability alerts' counts, the verdict and the run-health signals) to the
Trainer's trackers (``callbacks.tracking``). It also derives the pattern-class shares of a step once their
statistics are in.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bertwatch.callbacks._safe import BertWatchWarning
from bertwatch.callbacks.tracking import (
    headline_logs,
    layer_mean_logs,
    metric_name,
    send_to_trackers,
    verdict_logs,
)
from bertwatch.core.alerts import Alert, alert_counts
from bertwatch.core.rules import PATTERN_REQUIRED
from bertwatch.core.stat_names import ALL_STATS
from bertwatch.core.verdict import Verdict
from bertwatch.heads.maps.patterns import grid_pattern_shares, uniform_baselines
from bertwatch.probe.records import HeadEmbedding, NamedValues, RiderOutput, StepText

__all__ = ["Publisher"]


class Publisher:
    """Writes one run's results (see the module doc); ``writer`` None (not world process zero) writes nothing.

    ``trackers`` are the Trainer's reporting callbacks; one that fails is dropped with one warning. ``args``,
    ``state`` and ``event`` are handed to their ``on_log``; ``roles`` (the probe set's) give the pattern classes'
    uniform-head baselines.
    """

    def __init__(
        self,
        writer: Any,
        trackers: Sequence[Any],
        args: Any,
        state: Any,
        event: Mapping[str, Any],
        roles: Sequence[Any],
        length_info: Mapping[str, Any],
    ) -> None:
        self.writer = writer
        self.trackers = list(trackers)
        self.args = args
        self.state = state
        self.event = event
        self.roles = roles
        self.length_info = dict(length_info)
        self.uniform: dict[str, float] | None = None
        self.patterns_written: set[int] = set()
        self.sent: dict[int, set[str]] = defaultdict(set)

    def publish(
        self,
        step: int,
        grids: Mapping[str, np.ndarray],
        step_grids: Mapping[str, np.ndarray],
        summaries: Sequence[RiderOutput],
        examples: Sequence[tuple],
        measure_examples: Mapping[str, Sequence[tuple]] | None = None,
    ) -> None:
        """Write one pass: the riders' records, the new grids (the statistics' ``grids`` and the riders' grids
        of the probe set, with its length info, then the riders' other grids), the pattern shares once
        ``step_grids`` (all of the step's grids so far) hold their statistics, the ``examples``' maps (the weights)
        and the same examples' maps of other measures, ``{measure: examples}``
        (``tb.writer.metadata.ATTENTION_MEASURES``)."""
        if self.writer is None:
            return
        for summary in summaries:
            for record in summary.records:
                self._write_record(record, step)
        probed = dict(grids)
        for summary in summaries:
            probed.update(summary.grids if summary.on_probe_set else {})
        others = {n: g for summary in summaries if not summary.on_probe_set for n, g in summary.grids.items()}
        if probed or others:
            self.writer.add_head_grids(probed, step, probe=self.length_info)
            self.writer.add_head_grids(others, step)
            self._write_patterns(step, step_grids)
        if examples:
            self.writer.add_attention_maps(examples, step)
        for measure, measured in (measure_examples or {}).items():
            if measured:
                self.writer.add_attention_maps(measured, step, measure=measure)

    def publish_records(self, records: Sequence[NamedValues | StepText | HeadEmbedding], step: int) -> None:
        """Write records that come from outside a probe pass (the probe steps' series of ``callbacks.pacing``)."""
        if self.writer is not None:
            for record in records:
                self._write_record(record, step)

    def _write_record(self, record: NamedValues | StepText | HeadEmbedding, step: int) -> None:
        if isinstance(record, NamedValues):
            self.writer.add_named_values(record.tag, dict(record.values), step, record.description)
        elif isinstance(record, StepText):
            self.writer.add_step_text(record.name, list(record.lines), step, record.description, **record.content)
        else:
            self.writer.add_embedding(record.name, record.coords, record.layers, record.heads, step=step)

    def _write_patterns(self, step: int, grids: Mapping[str, np.ndarray]) -> None:
        """The share of heads in each of Kovaleva's pattern classes at this step, once its statistics are in."""
        if step in self.patterns_written or not all(n in grids for n in PATTERN_REQUIRED):
            return
        if self.uniform is None:
            self.uniform = uniform_baselines(self.roles)
        from bertwatch.tb.writer import metadata as md

        shares = grid_pattern_shares(grids, self.uniform)
        self.writer.add_named_values(md.PATTERN_SERIES, shares, step, "Share of heads in each pattern class (Kovaleva)")
        self.patterns_written.add(step)

    def send_layer_means(self, step: int, grids: Mapping[str, np.ndarray], wanted: set[str]) -> None:
        """The layer means (and most drifted heads) of the statistics in ``wanted`` measured at ``step``, and of
        the riders' grids (word classes), to the trackers, once per statistic and step."""
        if not self.trackers:
            return
        grids = {n: g for n, g in grids.items() if (n in wanted or n not in ALL_STATS) and n not in self.sent[step]}
        self.sent[step].update(grids)
        self._send({**layer_mean_logs(grids), **headline_logs(grids)}, "layer means")

    def publish_alerts(
        self, alerts: Sequence[Alert], layers: int, heads: int, step: int, reference_step: int, to_trackers: bool
    ) -> None:
        """The stability alerts in force at ``step`` (``core.alerts``): their table into the event file and, with
        ``to_trackers``, their counts per rule (``bertwatch/alerts/{rule}``, ``.../total``) to the trackers."""
        if self.writer is None:
            return
        self.writer.add_alerts(list(alerts), layers, heads, step, reference_step)
        if to_trackers and self.trackers:
            self._send({metric_name("alerts", rule): float(n) for rule, n in alert_counts(alerts).items()}, "alerts")

    def send_verdict(self, verdict: Verdict, health: Mapping[str, float]) -> None:
        """The verdict (``bertwatch/verdict/level``: 0 healthy, 1 at risk, 2 failing; ``.../known``,
        ``.../evidence``, ``.../rank``: ``tracking.verdict_logs``) and each run-health signal of its step
        (``bertwatch/run_health/{signal}``) to the trackers; only finite values."""
        if self.trackers:
            self._send(verdict_logs(verdict, health), "verdict")

    def _send(self, logs: Mapping[str, float], what: str) -> None:
        """``logs`` to every tracker; one that fails is dropped with one warning (training continues)."""
        for tracker, err in send_to_trackers(self.trackers, self.args, self.state, logs, self.event):
            self.trackers.remove(tracker)
            warnings.warn(
                f"bertwatch: {type(tracker).__name__} failed on bertwatch's {what} ({type(err).__name__}: "
                f"{err}); bertwatch sends it nothing more. Training continues.",
                BertWatchWarning,
                stacklevel=3,
            )

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        """Close the event writer; later calls write nothing."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None

"""The shared probe pass: one pass over the probe set per due step, whatever bertwatch callbacks asked for it.

Callbacks with equal probe settings (``callbacks.settings.ProbeSettings``) on the same model share one ``Monitor``
(a module-level registry keyed by the model object and the settings' value). At each
event the first callback to arrive runs a single pass for the union of what every due callback needs; the others
find the results cached. The pass never changes the user's training: eval mode, restored RNG and attention
implementation (``bertwatch.heads.capture``), ``torch.no_grad`` for maps, ``torch.autograd.grad`` on gates for
gradients, and its own copy of the probe batches.
"""

from __future__ import annotations

import contextlib
import os
import warnings
import weakref
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from bertwatch.callbacks._context import TrainerContext, tensorboard_run_dir
from bertwatch.callbacks._safe import BertWatchWarning, SetupError
from bertwatch.callbacks.probe_set import ProbeSet, ReferenceCache, build_probe_set, crop_maps, text_examples
from bertwatch.callbacks.settings import ALL_STATS, MAP_STATS, ProbeSettings, WatchSettings
from bertwatch.callbacks.tracking import headline_logs, is_tracker, layer_mean_logs, send_to_trackers
from bertwatch.callbacks.trainer_loss import GradientLoss, gradient_loss
from bertwatch.callbacks.word_classes import SHARE_PREFIX
from bertwatch.core.rules import PATTERN_REQUIRED
from bertwatch.heads.capture import capture, model_shape
from bertwatch.heads.importance import GRADIENT_NAMES, IG_NAME, gradient_stats, integrated_gradients, normalize_by_layer
from bertwatch.heads.norms import NORM_NAMES, head_grams, norm_stats
from bertwatch.heads.patterns import grid_pattern_shares, uniform_baselines
from bertwatch.heads.sharding import ShardingError, check_sharding
from bertwatch.heads.stats import DRIFT_NAMES, aggregate, compute_stats
from bertwatch.heads.unwrap import select_inputs, unwrap

__all__ = ["ALL_STATS", "MAP_STATS", "Monitor", "ProbeSettings", "monitor_for"]


class Subscriber(Protocol):
    """What a monitor asks of a callback."""

    disabled: bool
    stat_names: frozenset[str]

    def wants(self, event: str, step: int) -> bool: ...

    def wants_maps(self, event: str, step: int) -> int: ...

    def record(self, step: int, grids: Mapping[str, np.ndarray]) -> None: ...


_MONITORS: weakref.WeakKeyDictionary[torch.nn.Module, dict[ProbeSettings, Monitor]] = weakref.WeakKeyDictionary()


def monitor_for(model: torch.nn.Module, settings: ProbeSettings | WatchSettings) -> Monitor:
    """The monitor shared by every callback with equal probe settings (``ProbeSettings`` equality: plain data by
    value, objects by identity) on this very model object."""
    probe = settings.probe() if isinstance(settings, WatchSettings) else settings
    monitors = _MONITORS.setdefault(model, {})
    monitor = monitors.get(probe)
    if monitor is None:
        monitor = Monitor(model, probe)
        monitors[probe] = monitor
    return monitor


def _tokenizer_of(processing_class: Any) -> Any:
    return getattr(processing_class, "tokenizer", processing_class)


class Monitor:
    """One probe set, one reference, one pass per due step, one event writer (world process zero only)."""

    def __init__(self, model: torch.nn.Module, settings: ProbeSettings) -> None:
        self._model = weakref.ref(model)
        self.settings = settings
        self.subscribers: list[Subscriber] = []
        self.failed = False
        self.probe: ProbeSet | None = None
        self.writer: Any = None
        self.run_dir: str | None = None
        self._state: Any = None
        self._encoder: Any = lambda: None

    @property
    def model(self) -> torch.nn.Module | None:
        return self._model()

    @property
    def encoder(self) -> torch.nn.Module | None:
        """The transformers model inside the Trainer's model (``bertwatch.heads.unwrap``), as trained."""
        return self._encoder()

    def autocast(self) -> contextlib.AbstractContextManager:
        """The training's mixed precision, for every pass bertwatch makes through the model (the statistics are
        taken in float32 afterwards)."""
        args = getattr(self, "args", None)
        dtype = (
            torch.bfloat16 if getattr(args, "bf16", False) else torch.float16 if getattr(args, "fp16", False) else None
        )
        if dtype is None:
            return contextlib.nullcontext()
        try:
            return torch.autocast(self.device.type, dtype=dtype)
        except (RuntimeError, ValueError):
            return contextlib.nullcontext()

    # ---------------------------------------------------------------------------------------------- setup

    def attach(
        self, subscriber: Subscriber, args: Any, state: Any, kwargs: Mapping[str, Any], context: TrainerContext
    ) -> None:
        """Join this training run; the first subscriber of a run builds the probe set, reference and writer."""
        if self._state is not state:
            try:
                self._setup(args, state, kwargs, context)
            except BaseException:
                self.failed = True
                raise
        if subscriber not in self.subscribers:
            self.subscribers.append(subscriber)

    def _setup(self, args: Any, state: Any, kwargs: Mapping[str, Any], context: TrainerContext) -> None:
        self.close()
        model = self.model
        self.layers, self.heads = model_shape(model)
        try:
            check_sharding(model)
        except ShardingError as err:
            raise SetupError(str(err)) from err
        unwrapped = unwrap(model)
        self._encoder = weakref.ref(unwrapped.model)
        self.args = args
        self._state = state
        self.failed = False
        self.subscribers = []
        self.world_zero = bool(getattr(state, "is_world_process_zero", True))
        self.device = next(self.encoder.parameters()).device
        s = self.settings
        self.tokenizer = s.tokenizer if s.tokenizer is not None else _tokenizer_of(kwargs.get("processing_class"))
        if self.tokenizer is None:
            self.tokenizer = unwrapped.tokenizer
        texts, dataset = s.texts, None
        if texts is None:
            dataset = self._probe_dataset(kwargs, context)
            if unwrapped.tokenizer is not None and s.dataset is None:  # sentence-transformers: raw text columns
                texts, dataset = text_examples(dataset, s.num_examples, s.seed), None
        self.probe = build_probe_set(
            self.tokenizer,
            texts=texts,
            dataset=dataset,
            collator=self._collator(kwargs, context),
            model=model,
            num_examples=s.num_examples,
            seed=s.seed,
            batch_size=s.batch_size,
            max_length=s.max_length,
            remove_unused_columns=bool(getattr(args, "remove_unused_columns", True)),
            label_names=getattr(args, "label_names", None),
        )
        for batch in self.probe.batches:
            select_inputs(self.encoder, batch, getattr(args, "label_names", None) or ())
        self.loss: GradientLoss = gradient_loss(s.loss_fn, context.trainer, args, self.encoder)
        self._cache = ReferenceCache(os.path.join(args.output_dir, "bertwatch", "reference.pt"))
        self._reference: list[Tensor] | None = None
        self.reference_source = "the model before its first optimiser step"
        self.resumed = int(state.global_step) > 0
        if self.resumed:
            self._load_reference()
        self.begin_pending = not self.resumed
        self._handled: set[tuple[str, int]] = set()
        self._step = -1
        self._grids: dict[str, np.ndarray] = {}
        self._maps_written: set[int] = set()
        self._patterns_written: set[int] = set()
        self._uniform: dict[str, float] | None = None
        if self.world_zero:
            from bertwatch.tb.summary import SummaryWriter

            self.run_dir = tensorboard_run_dir(args, context, s.logging_dir)
            self.writer = SummaryWriter(self.run_dir)
        self._event = {k: v for k, v in kwargs.items() if k not in ("args", "state", "control")}
        self.trackers = [cb for cb in context.callbacks() if is_tracker(cb)] if self.world_zero else []
        self._sent: dict[int, set[str]] = defaultdict(set)

    def _probe_dataset(self, kwargs: Mapping[str, Any], context: TrainerContext) -> Any:
        if self.settings.dataset is not None:
            return self.settings.dataset
        if context.eval_dataset is not None:
            return context.eval_dataset
        train = context.train_dataset
        if train is not None:
            why = (
                "the Trainer has no eval_dataset"
                if context.bound
                else "bertwatch cannot see the Trainer's eval_dataset before its first evaluation (the callback was "
                "only placed in callbacks=[...]; attach it with bertwatch.watch(trainer) to use the eval set)"
            )
            warnings.warn(
                f"bertwatch: {why}, so the probe set is sampled from the training set; pass probe_texts= or "
                "probe_dataset= to choose it",
                BertWatchWarning,
                stacklevel=2,
            )
        return train

    def _collator(self, kwargs: Mapping[str, Any], context: TrainerContext) -> Callable | None:
        if self.settings.collator is not None:
            return self.settings.collator
        return context.data_collator

    def _load_reference(self) -> None:
        maps = self._cache.load(self.probe.fingerprint, self.layers, self.heads)
        if maps is not None:
            self._reference = [m.to(self.device) for m in maps]
            self.reference_source = f"the cache {self._cache.path}"
        elif self.settings.reference_model is None:
            self.reference_source = f"the model resumed at step {self._state.global_step}"

    def _warn_resumed_reference(self) -> None:
        warnings.warn(
            f"bertwatch: resuming without a reference cache for this probe set at {self._cache.path}; drift is "
            f"measured from the model at step {self._state.global_step}. Pass reference_model= to measure it "
            "from the pretrained model.",
            BertWatchWarning,
            stacklevel=2,
        )

    def needs_drift(self) -> bool:
        return any(set(DRIFT_NAMES) & s.stat_names for s in self.active())

    def active(self) -> list[Subscriber]:
        return [s for s in self.subscribers if not s.disabled]

    # ---------------------------------------------------------------------------------------------- events

    def run(self, event: str, state: Any) -> None:
        """Handle ``event`` at ``state.global_step`` once for all subscribers; the begin pass runs first if pending."""
        if self.failed:
            raise RuntimeError("this bertwatch monitor already failed")
        if self.begin_pending and event != "begin":
            self.run("begin", state)
        if event == "begin":
            if not self.begin_pending:
                return
            self.begin_pending = False
        step = int(state.global_step)
        if (event, step) in self._handled:
            return
        self._handled.add((event, step))
        try:
            self._run(event, step)
        except BaseException:
            self.failed = True
            raise

    def _run(self, event: str, step: int) -> None:
        due = [s for s in self.active() if s.wants(event, step)]
        need_reference = event == "begin" and self._reference is None and self.needs_drift()
        if step != self._step:
            self._step, self._grids = step, {}
        wanted = set().union(*(s.stat_names for s in due)) if due else set()
        missing = [n for n in ALL_STATS if n in wanted and n not in self._grids]
        num_maps = max((s.wants_maps(event, step) for s in due), default=0)
        if step in self._maps_written:
            num_maps = 0
        if self._reference is None and any(n in DRIFT_NAMES for n in missing):
            if self.settings.reference_model is not None:
                need_reference = True
            elif self.resumed:
                self._warn_resumed_reference()
        consumers = [c for s in due for c in getattr(s, "map_consumers", lambda monitor, step: [])(self, step)]
        if missing or num_maps or need_reference or consumers:
            grids, examples = self._compute(missing, num_maps, need_reference, consumers)
            self._grids.update(grids)
            if self.writer is not None:
                if grids:
                    probed = {n: g for n, g in grids.items() if not n.startswith(SHARE_PREFIX)}
                    self.writer.add_head_grids(probed, step, probe=self.probe.length_info())
                    self.writer.add_head_grids({n: g for n, g in grids.items() if n not in probed}, step)
                    self._write_patterns(step)
                if examples:
                    self.writer.add_attention_maps(examples, step)
            if examples:
                self._maps_written.add(step)
        for s in due:
            s.record(step, {n: self._grids[n] for n in ALL_STATS if n in s.stat_names and n in self._grids})
        if event != "end":  # by on_train_end the trackers have closed their runs
            self._send_layer_means(step, [s for s in due if getattr(s, "log_to_trackers", False)])

    def _send_layer_means(self, step: int, senders: Sequence[Subscriber]) -> None:
        """The layer means (and most drifted heads) of the statistics measured at ``step``, and of the analyses'
        grids (word classes), to the Trainer's trackers, once per statistic."""
        if not senders or not self.trackers:
            return
        wanted = set().union(*(s.stat_names for s in senders))
        grids = {
            n: g for n, g in self._grids.items() if (n in wanted or n not in ALL_STATS) and n not in self._sent[step]
        }
        self._sent[step].update(grids)
        logs = {**layer_mean_logs(grids), **headline_logs(grids)}
        for tracker, err in send_to_trackers(self.trackers, self.args, self._state, logs, self._event):
            self.trackers.remove(tracker)
            warnings.warn(
                f"bertwatch: {type(tracker).__name__} failed on bertwatch's layer means ({type(err).__name__}: "
                f"{err}); they are no longer sent to it. Training continues.",
                BertWatchWarning,
                stacklevel=2,
            )

    def _write_patterns(self, step: int) -> None:
        """The share of heads in each of Kovaleva's pattern classes at this step, once its statistics are in."""
        if step in self._patterns_written or not all(n in self._grids for n in PATTERN_REQUIRED):
            return
        if self._uniform is None:
            self._uniform = uniform_baselines(self.probe.roles)
        from bertwatch.tb import metadata as md

        shares = grid_pattern_shares(self._grids, self._uniform)
        self.writer.add_named_values(md.PATTERN_SERIES, shares, step, "Share of heads in each pattern class (Kovaleva)")
        self._patterns_written.add(step)

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def release(self, subscriber: Subscriber) -> None:
        """A subscriber is done with this run; the last one closes the writer and frees the probe tensors."""
        if subscriber in self.subscribers:
            self.subscribers.remove(subscriber)
        if not self.active():
            self.close()
            self._reference = None
            if not self.failed:  # a failed monitor stays registered, so callbacks still to attach see it failed
                monitors = _MONITORS.get(self.model, {})
                for key in [k for k, m in monitors.items() if m is self]:
                    del monitors[key]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    # ---------------------------------------------------------------------------------------------- the pass

    def _model_inputs(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return select_inputs(self.encoder, batch, getattr(self.args, "label_names", None) or ())

    def _compute(
        self, names: Sequence[str], num_maps: int, need_reference: bool, consumers: Sequence[Any] = ()
    ) -> tuple[dict[str, np.ndarray], list[tuple]]:
        """One pass over the probe set: ``{name: [layers, heads]}`` grids and the first ``num_maps`` examples' maps.

        ``consumers`` (``bertwatch.callbacks.analyses``) see every batch's maps and add their own grids."""
        model, s, loss = self.encoder, self.settings, self.loss.arguments()
        map_names = [n for n in names if n in MAP_STATS]
        norm_names = [n for n in map_names if n in NORM_NAMES]
        map_names = [n for n in map_names if n not in NORM_NAMES]
        grams = head_grams(model) if norm_names else None
        grad_names = [n for n in names if n in GRADIENT_NAMES]
        want_ig = IG_NAME in names
        if (grad_names or want_ig) and not self.probe.has_labels and s.loss_fn is None:
            raise RuntimeError("gradient statistics need labels in every probe example")  # checked at setup
        if need_reference and s.reference_model is not None:
            self._reference_from(s.reference_model)
        building = self._reference is None and (need_reference or any(n in DRIFT_NAMES for n in map_names))
        new_reference: list[Tensor] = []
        per_example: dict[str, list[Tensor]] = defaultdict(list)
        examples: list[tuple] = []
        for k, cpu_batch in enumerate(self.probe.batches):
            batch = {key: v.to(self.device) for key, v in cpu_batch.items()}
            roles = self.probe.roles[k].to(self.device)
            attn = values = contexts = None
            if grad_names:  # its maps, values and contexts serve the other statistics too (one forward, not two)
                with self.autocast():
                    grads, attn, values, contexts = gradient_stats(model, batch, roles, return_states=True, **loss)
                for name in grad_names:
                    per_example[name].append(grads[name])
            if map_names or norm_names or len(examples) < num_maps or building or consumers:
                if attn is None or (norm_names and contexts is None):
                    record_values = bool(norm_names)
                    with (
                        torch.no_grad(),
                        self.autocast(),
                        capture(model, record_values=record_values) as cap,
                    ):
                        model(**self._model_inputs(batch))
                    attn, values, contexts = cap.attentions, cap.values, cap.contexts
                if norm_names:
                    for name, value in norm_stats(attn, values, grams, roles, norm_names, contexts).items():
                        per_example[name].append(value)
                del values, contexts
                start = self.probe.first_row(k)
                for consumer in consumers:
                    consumer.consume(start, attn, roles)
                if building:
                    new_reference.extend(m.to(torch.float16) for m in crop_maps(attn, roles.real))
                reference = None
                if any(n in DRIFT_NAMES for n in map_names):
                    reference = self._reference_batch(k, new_reference if building else self._reference)
                if map_names:
                    stats = compute_stats(attn, roles, map_names, reference, compat_length=s.compat_length)
                    for name, value in stats.items():
                        per_example[name].append(value)
                for _row, maps in enumerate(crop_maps(attn[: max(0, num_maps - len(examples))], roles.real)):
                    index = len(examples)
                    examples.append((self.probe.tokens[index], maps.float().cpu(), self.probe.segments[index]))
            del attn
            if want_ig:
                with self.autocast():
                    per_example[IG_NAME].append(integrated_gradients(model, batch, steps=s.ig_steps, **loss))
        if building:
            self._reference = new_reference
            if s.cache_reference and self.world_zero:
                self._cache.save(new_reference, self.probe.fingerprint, self.layers, self.heads, self.reference_source)
        grids = aggregate({n: torch.cat(v) for n, v in per_example.items()})
        if s.normalize_importance and "head_importance" in grids:
            grids["head_importance"] = normalize_by_layer(grids["head_importance"])
        ordered = {n: grids[n].detach().float().cpu().numpy() for n in names if n in grids}
        for consumer in consumers:
            ordered.update(consumer.finish(self.writer, self._step))
        return ordered, examples

    def _reference_batch(self, k: int, reference: list[Tensor]) -> list[Tensor]:
        """Batch k's encoder rows of the cropped float16 reference (``compute_stats`` pads it block by block)."""
        start, size = self.probe.first_row(k), self.probe.roles[k].real.shape[0]
        return reference[start : start + size]

    def _reference_from(self, reference_model: Any) -> None:
        """The named reference model's maps on the probe set (cropped, float16)."""
        if isinstance(reference_model, (str, os.PathLike)):
            from transformers import AutoModel

            reference_model = AutoModel.from_pretrained(reference_model).to(self.device)
        if model_shape(reference_model) != (self.layers, self.heads):
            raise SetupError(
                f"reference_model has {model_shape(reference_model)} (layers, heads); the trained model has "
                f"{(self.layers, self.heads)}"
            )
        reference_model = unwrap(reference_model).model
        device = next(reference_model.parameters()).device
        maps: list[Tensor] = []
        for k, cpu_batch in enumerate(self.probe.batches):
            batch = {key: v.to(device) for key, v in select_inputs(reference_model, cpu_batch).items()}
            with torch.no_grad(), capture(reference_model) as cap:
                reference_model(**batch)
            maps.extend(m.to(self.device, torch.float16) for m in crop_maps(cap.attentions, self.probe.roles[k].real))
        self._reference = maps
        self.reference_source = f"the reference model {getattr(reference_model.config, '_name_or_path', '')}"
        if self.settings.cache_reference and self.world_zero:
            self._cache.save(maps, self.probe.fingerprint, self.layers, self.heads, self.reference_source)

"""The trivial baseline of a metric: what always giving the same answer scores on the same examples, and whether a
model beats it (the rule's one home; ``bertwatch ablate``, ``bertwatch ship``, the report and the plugin's
Ablation view use it). Torch-free, numpy only.

The rule:

* **the constant predictor** is the class that, answered for every example, scores best on the metric over these
  examples (ties go to the most frequent label). For accuracy that is the majority class (its share); for F1 of the
  positive class it is always-positive, ``2p / (1 + p)`` with ``p`` the positive share; Matthews correlation is 0
  for any constant, so the majority class is named. Pearson and Spearman are undefined for a constant prediction
  (zero variance): there is no trivial score, and the comparison says so rather than print 0.
* **the comparison** is paired: on each bootstrap resample of the examples (the same resamples for every model
  row), the model's metric minus the constant's; its percentile interval at ``confidence``.
* **no better than the constant** when that interval reaches 0 or below (``ci_low <= 0``): the model's figures then
  describe a model not worth shipping, and this is said first, in words.
* **collapsed to one class** when one class takes at least :data:`COLLAPSE_SHARE` of the model's predictions.
* a change that *improves* the metric when heads are disabled or the model is quantized says the model was not at
  its best (undertrained, or fit to an imbalanced set), not that the method helps (:data:`NOT_AT_ITS_BEST`).

The metric itself comes from the caller as ``score(preds [K, n], labels [n], counts [R, n]) -> [K, R]`` (the
vectorised metrics of ``bertwatch.ablation.bootstrap.metric_on_counts``), with the resamples' counts ``[R, n]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

__all__ = [
    "COLLAPSE_SHARE",
    "NOT_AT_ITS_BEST",
    "ConstantComparison",
    "class_names",
    "class_shares",
    "compare_with_constant",
    "constant_class",
    "improvement_note",
    "paired_difference",
]

#: A model whose most frequent predicted class takes this share of the examples or more is collapsed to one class.
COLLAPSE_SHARE = 0.95
#: Metrics that are undefined for a constant prediction (zero variance).
UNDEFINED_FOR_CONSTANT = ("pearson", "spearmanr")
#: What an improvement from disabling heads or quantizing says, wherever such a gain is the headline.
NOT_AT_ITS_BEST = (
    "the model was not at its best (undertrained, or fit to an imbalanced set), not a gain of removing parts"
)


def improvement_note(delta: float | None, ci_low: float | None, ci_high: float | None, greater: bool = True) -> str:
    """``": an improvement, which says <NOT_AT_ITS_BEST>"`` when a change from removing parts (heads, precision) improves
    the metric beyond resampling noise (its interval lies on the better side of 0); else ``""``.

    Example:
        >>> improvement_note(0.04, 0.01, 0.07).startswith(": an improvement, which says the model was not at its best")
        True
        >>> improvement_note(0.04, -0.01, 0.07), improvement_note(-0.04, -0.07, -0.01)
        ('', '')
    """
    if delta is None or ci_low is None or ci_high is None:
        return ""
    if not all(math.isfinite(float(v)) for v in (delta, ci_low, ci_high)):
        return ""
    better = float(ci_low) > 0 if greater else float(ci_high) < 0
    return f": an improvement, which says {NOT_AT_ITS_BEST}" if better else ""


#: GLUE's class names by task (the order of HF ``glue``), used when the model's config names its classes
#: ``LABEL_0``, ``LABEL_1``, ... (the default).
GLUE_CLASS_NAMES = {
    "mrpc": ("not paraphrase", "paraphrase"),
    "qqp": ("not duplicate", "duplicate"),
    "sst2": ("negative", "positive"),
    "cola": ("unacceptable", "acceptable"),
    "rte": ("entailment", "not entailment"),
    "qnli": ("entailment", "not entailment"),
    "wnli": ("not entailment", "entailment"),
    "mnli": ("entailment", "neutral", "contradiction"),
}

#: ``score(preds [K, n], labels [n], counts [R, n]) -> [K, R]``: a metric on weighted resamples.
Score = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def class_names(given: Sequence[str], task: str | None = None) -> tuple[str, ...]:
    """The classes' names: the model's own (``heads.task_heads.label_names``) unless they are the default
    ``LABEL_i``, then GLUE's for a GLUE task, else ``class i``.

    Args:
        given: ``[C]`` names by class id, from the model's config.
        task: the GLUE task name, if any.

    Returns:
        ``C`` names.

    Example:
        >>> class_names(["LABEL_0", "LABEL_1"], "mrpc")
        ('not paraphrase', 'paraphrase')
        >>> class_names(["neg", "pos"], "mrpc"), class_names(["LABEL_0", "LABEL_1"])
        (('neg', 'pos'), ('class 0', 'class 1'))
    """
    names = tuple(str(n) for n in given)
    if names and all(n == f"LABEL_{i}" or n == str(i) for i, n in enumerate(names)):
        glue = GLUE_CLASS_NAMES.get((task or "").lower().replace("-", ""))
        return glue if glue is not None and len(glue) == len(names) else tuple(f"class {i}" for i in range(len(names)))
    return names


def class_shares(predictions: np.ndarray, num_classes: int) -> np.ndarray:
    """The share of the examples predicted as each class.

    Args:
        predictions: ``[n]`` class ids in ``0..num_classes-1``.
        num_classes: C.

    Returns:
        ``[C]`` float64 shares summing to 1.

    Raises:
        ValueError: no predictions, or a class id out of range.

    Example:
        >>> class_shares(np.array([1, 1, 1, 0]), 3).tolist()
        [0.25, 0.75, 0.0]
    """
    predictions = np.asarray(predictions).astype(np.int64).ravel()
    if predictions.size == 0:
        raise ValueError("no predictions to count")
    if predictions.min() < 0 or predictions.max() >= num_classes:
        raise ValueError(f"predicted class ids must be in 0..{num_classes - 1}, got {sorted(set(predictions))}")
    return np.bincount(predictions, minlength=num_classes).astype(np.float64) / predictions.size


def constant_class(labels: np.ndarray, num_classes: int, score: Score) -> tuple[int, float]:
    """The constant answer that scores best on these examples, and its score (see the module docstring).

    Args:
        labels: ``[n]`` gold class ids.
        num_classes: C; every class ``0..C-1`` is tried.
        score: the metric on weighted resamples (module docstring).

    Returns:
        ``(class id, score)``; the score is NaN when the metric is undefined for every constant.

    Example:
        >>> from bertwatch.core.baseline import constant_class
        >>> acc = lambda p, y, w: ((p == y[None]).astype(float) @ w.T) / w.sum(1)[None]
        >>> constant_class(np.array([1, 1, 0]), 2, acc)
        (1, 0.6666666666666666)
    """
    labels = np.asarray(labels).astype(np.int64).ravel()
    counts = np.bincount(labels[(labels >= 0) & (labels < num_classes)], minlength=num_classes)
    constants = np.repeat(np.arange(num_classes)[:, None], labels.size, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = np.asarray(score(constants, labels, np.ones((1, labels.size))), dtype=np.float64)[:, 0]
    if not np.isfinite(scores).any():
        return int(np.argmax(counts)), math.nan
    best = np.nanmax(scores)
    tied = [c for c in range(num_classes) if np.isfinite(scores[c]) and scores[c] >= best - 1e-12]
    chosen = max(tied, key=lambda c: (counts[c], -c))
    return int(chosen), float(scores[chosen])


def paired_difference(
    predictions: np.ndarray,
    constant: np.ndarray,
    labels: np.ndarray,
    score: Score,
    counts: np.ndarray,
    confidence: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The model's metric minus the constant's on the whole set, and its paired-bootstrap percentile interval.

    Args:
        predictions: ``[K, n]`` the models' class predictions (K rows, e.g. fp32 and int8).
        constant: ``[n]`` the constant prediction.
        labels: ``[n]`` gold labels.
        score: the metric on weighted resamples (module docstring).
        counts: ``[R, n]`` how often each example is drawn in each resample; resamples where the metric is
            undefined are left out.
        confidence: the interval's level, in (0, 1).

    Returns:
        ``(delta [K], ci_low [K], ci_high [K])`` float64; NaN where no resample is defined.

    Example:
        >>> acc = lambda p, y, w: ((p == y[None]).astype(float) @ w.T) / w.sum(1)[None]
        >>> d, lo, hi = paired_difference(np.array([[1, 0, 1]]), np.array([1, 1, 1]), np.array([1, 0, 1]), acc,
        ...                               np.ones((4, 3)), 0.95)
        >>> round(float(d[0]), 4), round(float(lo[0]), 4)
        (0.3333, 0.3333)
    """
    predictions = np.atleast_2d(np.asarray(predictions))
    labels = np.asarray(labels)
    n = labels.shape[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        whole = np.ones((1, n))
        delta = np.asarray(score(predictions, labels, whole), dtype=np.float64)[:, 0] - float(
            np.asarray(score(np.asarray(constant)[None], labels, whole), dtype=np.float64)[0, 0]
        )
        resampled = np.asarray(score(predictions, labels, counts), dtype=np.float64) - np.asarray(
            score(np.asarray(constant)[None], labels, counts), dtype=np.float64
        )
    tail = (1 - confidence) / 2 * 100
    low, high = np.full(len(predictions), np.nan), np.full(len(predictions), np.nan)
    for k, row in enumerate(resampled):
        finite = row[np.isfinite(row)]
        if finite.size:
            low[k], high[k] = np.percentile(finite, [tail, 100 - tail])
    return delta, low, high


@dataclass(frozen=True)
class ConstantComparison:
    """A model (or several, ``rows``) against the constant predictor on the same examples (module docstring).

    ``values``, ``delta``, ``ci_low``, ``ci_high``: ``[K]`` lists, the model rows' metric and their difference to
    the constant with its interval; ``shares``: ``[K][C]`` predicted class shares; ``label_shares``: ``[C]``.
    """

    metric: str
    label: str
    rows: tuple[str, ...]
    classes: tuple[str, ...]
    num_examples: int
    constant: int
    value: float | None  # the constant's score; None when undefined for a constant
    values: list[float]
    delta: list[float | None]
    ci_low: list[float | None]
    ci_high: list[float | None]
    shares: list[list[float]]
    label_shares: list[float]
    confidence: float = 0.95
    n_resamples: int = 0
    undefined: str = ""  # why there is no trivial score (a correlation of a constant)
    #: what the verdict says is worth nothing when the model is no better (``"its ablation figures"``)
    what: str = "its figures"

    @property
    def constant_name(self) -> str:
        return self.classes[self.constant] if self.constant < len(self.classes) else f"class {self.constant}"

    def no_better(self, row: int = 0) -> bool:
        """True when row's paired interval of (model − constant) reaches 0 or below; False when it lies above 0 or
        the constant's score is undefined."""
        low = self.ci_low[row] if row < len(self.ci_low) else None
        if self.value is None:
            return False
        return low is None or not math.isfinite(low) or low <= 0

    def collapsed(self, row: int = 0) -> int | None:
        """The class that takes at least :data:`COLLAPSE_SHARE` of row's predictions; None when none does."""
        shares = self.shares[row] if row < len(self.shares) else []
        if not shares:
            return None
        top = int(np.argmax(shares))
        return top if shares[top] >= COLLAPSE_SHARE else None

    def _name(self, c: int) -> str:
        return self.classes[c] if c < len(self.classes) else f"class {c}"

    def shares_text(self, row: int = 0) -> str:
        """``"predicted: paraphrase 100.0%, not paraphrase 0.0% (collapsed to one class); labels: paraphrase
        68.4%, not paraphrase 31.6%"``."""
        shares = self.shares[row] if row < len(self.shares) else []
        if not shares:
            return ""
        order = sorted(range(len(shares)), key=lambda c: -shares[c])
        text = "predicted: " + ", ".join(f"{self._name(c)} {shares[c]:.1%}" for c in order)
        text += " (collapsed to one class)" if self.collapsed(row) is not None else ""
        if self.label_shares:
            order = sorted(range(len(self.label_shares)), key=lambda c: -self.label_shares[c])
            text += "; labels: " + ", ".join(f"{self._name(c)} {self.label_shares[c]:.1%}" for c in order)
        return text

    def _interval(self, row: int) -> str:
        d, lo, hi = self.delta[row], self.ci_low[row], self.ci_high[row]
        if d is None or lo is None or hi is None:
            return ""
        return f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}]"

    def comparison(self, row: int = 0) -> str:
        """Row against the constant in a few words: ``"F1 0.8060 against 0.8120, model − constant -0.0060
        [-0.0300, +0.0100]; paired bootstrap, 95%, 1000 resamples over 408 examples"``."""
        if self.value is None:
            return f"{self.label} {self.values[row]:.4f}; {self.undefined}"
        how = f"paired bootstrap, {self.confidence:.0%}, {self.n_resamples} resamples over {self.num_examples} examples"
        return (
            f"{self.label} {self.values[row]:.4f} against {self.value:.4f}, model − constant {self._interval(row)}; "
            f"{how}"
        )

    def about(self, what: str) -> ConstantComparison:
        """The same comparison, its verdict speaking of ``what`` (``"its ship figures"``)."""
        return replace(self, what=what)

    def sentence(self, row: int = 0) -> str:
        """The verdict in one sentence, to be said first: no better than the constant (and what that makes of
        :attr:`what`), better than it, or no trivial score for this metric."""
        if self.value is None:
            return f"no constant answer to compare with: {self.undefined}"
        if self.no_better(row):
            collapsed = self.collapsed(row)
            also = (
                f"; it answers '{self._name(collapsed)}' for {self.shares[row][collapsed]:.1%} of the examples "
                "(collapsed to one class)"
                if collapsed is not None
                else ""
            )
            return (
                f"this model is no better than always answering '{self.constant_name}' ({self.comparison(row)}){also}: "
                f"{self.what} describe a model not worth shipping"
            )
        return f"better than always answering '{self.constant_name}': {self.comparison(row)}"

    def lines(self, row: int = 0) -> list[str]:
        """The first lines of a command's output: the verdict sentence, then the predicted class shares."""
        shares = self.shares_text(row)
        return [self.sentence(row)] + ([shares] if shares else [])

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``ablation.json``'s and ``ship.json``'s ``trivial_baseline``), with the verdict as a
        boolean (``no_better_than_constant``, of the first row), ``collapsed_to_one_class`` and its sentence."""

        def num(v: Any) -> float | None:
            return None if v is None or not math.isfinite(float(v)) else float(v)

        collapsed = self.collapsed(0)
        return {
            "metric": self.metric,
            "label": self.label,
            "constant_class": self.constant,
            "constant_name": self.constant_name,
            "value": num(self.value),
            "undefined": self.undefined or None,
            "rows": list(self.rows),
            "classes": list(self.classes),
            "num_examples": self.num_examples,
            "values": [num(v) for v in self.values],
            "delta": [num(v) for v in self.delta],
            "ci_low": [num(v) for v in self.ci_low],
            "ci_high": [num(v) for v in self.ci_high],
            "shares": [[float(s) for s in row] for row in self.shares],
            "label_shares": [float(s) for s in self.label_shares],
            "confidence": self.confidence,
            "n_resamples": self.n_resamples,
            "no_better_than_constant": self.no_better(0),
            "no_better_rows": [self.no_better(k) for k in range(len(self.rows))],
            "collapsed_to_one_class": collapsed is not None,
            "collapsed_class": collapsed,
            "sentence": self.sentence(),
            "what": self.what,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ConstantComparison:
        """Read back what :meth:`to_json` wrote."""
        return cls(
            metric=str(doc["metric"]),
            label=str(doc.get("label") or doc["metric"]),
            rows=tuple(doc.get("rows") or ("model",)),
            classes=tuple(doc.get("classes") or ()),
            num_examples=int(doc.get("num_examples") or 0),
            constant=int(doc.get("constant_class") or 0),
            value=doc.get("value"),
            values=[math.nan if v is None else float(v) for v in doc.get("values") or []],
            delta=list(doc.get("delta") or []),
            ci_low=list(doc.get("ci_low") or []),
            ci_high=list(doc.get("ci_high") or []),
            shares=[list(r) for r in doc.get("shares") or []],
            label_shares=list(doc.get("label_shares") or []),
            confidence=float(doc.get("confidence") or 0.95),
            n_resamples=int(doc.get("n_resamples") or 0),
            undefined=str(doc.get("undefined") or ""),
            what=str(doc.get("what") or "its figures"),
        )


def compare_with_constant(
    predictions: np.ndarray,
    labels: np.ndarray,
    score: Score,
    counts: np.ndarray,
    *,
    metric: str,
    label: str | None = None,
    num_classes: int | None = None,
    classes: Sequence[str] = (),
    rows: Sequence[str] = ("model",),
    confidence: float = 0.95,
) -> ConstantComparison:
    """Models' class predictions (or a regression's values) against the best constant answer on the same examples.

    Args:
        predictions: ``[K, n]`` (or ``[n]``) class ids, or real values for a regression metric.
        labels: ``[n]`` gold labels.
        score: the metric on weighted resamples (module docstring).
        counts: ``[R, n]`` the bootstrap resamples' counts (shared by every row).
        metric: the metric's key (``f1``, ``accuracy``, ``matthews_correlation``, ``pearson``, ...).
        label: how people read it (``F1``); default ``metric``.
        num_classes: C; default the largest class id seen plus one. Unused for a regression metric.
        classes: the classes' names (:func:`class_names`).
        rows: a name per prediction row.
        confidence: the interval's level.

    Returns:
        A :class:`ConstantComparison`.

    Raises:
        ValueError: predictions and labels that disagree on n, or no examples.

    Example:
        >>> from bertwatch.ablation.bootstrap import metric_on_counts, resample_counts
        >>> f1 = lambda p, y, w: metric_on_counts("f1", p, y, w)
        >>> labels = np.array([1] * 7 + [0] * 3)
        >>> found = compare_with_constant(np.ones(10, int), labels, f1, resample_counts(10, 200, 0), metric="f1")
        >>> round(found.value, 4), found.no_better(), found.collapsed()  # 2p/(1+p) with p = 0.7
        (0.8235, True, 1)
    """
    predictions = np.atleast_2d(np.asarray(predictions))
    labels = np.asarray(labels)
    if labels.size == 0 or predictions.shape[1] != labels.shape[0]:
        raise ValueError(f"predictions {predictions.shape} and labels {labels.shape} must share n > 0 examples")
    label = label or metric
    n = int(labels.shape[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        values = [float(v) for v in np.asarray(score(predictions, labels, np.ones((1, n))), dtype=np.float64)[:, 0]]
    common = dict(metric=metric, label=label, rows=tuple(rows), num_examples=n, values=values, confidence=confidence)
    if metric in UNDEFINED_FOR_CONSTANT:
        empty: list[float | None] = [None] * len(values)
        return ConstantComparison(
            **common,
            classes=tuple(classes),
            constant=0,
            value=None,
            delta=empty,
            ci_low=list(empty),
            ci_high=list(empty),
            shares=[],
            label_shares=[],
            undefined=f"{label} is undefined for a constant prediction (it has no variance)",
        )
    c = int(num_classes or max(int(predictions.max()), int(labels.max())) + 1)
    constant, value = constant_class(labels, c, score)
    delta, low, high = paired_difference(predictions, np.full(n, constant), labels, score, counts, confidence)

    def num(v: float) -> float | None:
        return float(v) if math.isfinite(v) else None

    return ConstantComparison(
        **common,
        classes=tuple(classes) or tuple(f"class {i}" for i in range(c)),
        constant=constant,
        value=num(value),
        delta=[num(v) for v in delta],
        ci_low=[num(v) for v in low],
        ci_high=[num(v) for v in high],
        shares=[class_shares(row, c).tolist() for row in predictions],
        label_shares=class_shares(labels, c).tolist(),
        n_resamples=int(len(counts)),
        undefined="" if math.isfinite(value) else f"{label} is undefined for every constant answer on these examples",
    )

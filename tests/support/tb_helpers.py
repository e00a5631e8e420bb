"""Helpers for the TensorBoard plugin tests: synthetic bertwatch logs, an in-process TensorBoard WSGI app and
a real ``tensorboard`` process. Synthetic data only (no torch): shapes of all-MiniLM-L6-v2 (6 x 12).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from bertwatch.core import rules
from bertwatch.tb.plugin import frontend_path
from bertwatch.tb.writer.metadata import PATTERN_SERIES, WORD_CLASS_SERIES
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.torchrun import free_port

TB = Path(__file__).resolve().parents[2] / "bertwatch" / "tb"
FRONTEND_SUFFIXES = (".js", ".css", ".json")


def frontend_file(name: str) -> Path:
    """The file the plugin serves as ``/static/<name>`` (or ``/index.js``), in its view's folder or in static/."""
    return TB / frontend_path(name)


def frontend_files(pattern: str = "*") -> list[Path]:
    """Every frontend file (ES modules, style sheet, colours) matching ``pattern``: static/ and each view's folder."""
    folders = [TB / "static", *sorted(p for p in (TB / "views").iterdir() if p.is_dir())]
    return sorted(p for f in folders for p in f.glob(pattern) if p.is_file() and p.suffix in FRONTEND_SUFFIXES)


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
VIEWPORT = {"width": 1440, "height": 900}
MAX_PNG_BYTES = 300 * 1024
L, H = 6, 12
STEPS = list(range(0, 301, 25))  # 13 logged steps
XSS = "<img src=x onerror=alert(1)>"
XSS_RUN = XSS  # a run directory named like an HTML payload
STATS = (
    "cls_mass", "sep_mass", "punct_mass", "sep_to_sep", "sep_mass_kovaleva", "self", "prev", "next",
    "entropy", "cls_entropy", "drift_cosine", "drift_js", "head_importance",
)  # fmt: skip

TOKENS_A = "[CLS] the quick brown fox jumps over the lazy dog . [SEP] it was not amused , sadly . [SEP]".split()
TOKENS_B = "[CLS] attention heads look at [SEP] and punctuation , mostly . [SEP]".split()


def head_types(layers=L, heads=H, seed=0):
    """A plausible role for each head: early layers [CLS]/positional, middle [SEP], late punctuation."""
    rng = np.random.default_rng(seed)
    types = np.empty((layers, heads), dtype=object)
    for l in range(layers):
        frac = l / max(1, layers - 1)
        choices = ["cls", "prev", "next", "broad", "self", "mixed"] if frac < 0.34 else (
            ["sep", "sep", "broad", "mixed", "next", "prev"] if frac < 0.67 else ["punct", "punct", "sep", "broad", "mixed", "cls"]
        )  # fmt: skip
        types[l] = rng.choice(choices, size=heads)
    types[0, 3], types[1, 5], types[2, 7] = "prev", "next", "prev"
    return types


def synthetic_grids(step, *, layers=L, heads=H, seed=0, max_step=STEPS[-1]):
    """``{stat: [layers, heads]}`` that look like Clark's figures and drift smoothly with ``step``."""
    rng = np.random.default_rng(seed * 100003 + step)
    types = head_types(layers, heads, seed)
    p = step / max(1, max_step)
    base = {s: np.full((layers, heads), 0.04) for s in ("cls_mass", "sep_mass", "punct_mass", "self", "prev", "next")}
    entropy = np.full((layers, heads), 2.6)
    for (l, k), t in np.ndenumerate(types):
        strength = 0.62 + 0.25 * ((l * 7 + k * 3) % 10) / 10
        if t in ("cls", "sep", "punct", "prev", "next", "self"):
            key = {"cls": "cls_mass", "sep": "sep_mass", "punct": "punct_mass"}.get(t, t)
            base[key][l, k] = strength
            entropy[l, k] = 1.2 + 0.8 * (1 - strength)
        elif t == "broad":
            entropy[l, k] = 3.9 + 0.3 * ((l + k) % 3) / 3
        else:
            entropy[l, k] = 2.8 + 0.5 * ((l + 2 * k) % 5) / 5
    late = np.linspace(0, 1, layers)[:, None] ** 2
    out = {}
    for name, grid in base.items():
        g = grid + 0.02 * rng.standard_normal(grid.shape) + (0.08 * p * late if name == "sep_mass" else 0)
        out[name] = np.clip(g, 0, 1)
    out["sep_to_sep"] = np.clip(0.3 + 0.6 * out["sep_mass"] + 0.03 * rng.standard_normal((layers, heads)), 0, 1)
    out["sep_mass_kovaleva"] = out["sep_mass"] / 2
    out["entropy"] = entropy + 0.05 * rng.standard_normal((layers, heads))
    out["cls_entropy"] = entropy * 0.9 + 0.3
    drift = p * (0.02 + 0.22 * late) * (0.6 + 0.8 * np.random.default_rng(seed).random((layers, heads)))
    out["drift_cosine"] = 1 - drift
    out["drift_js"] = 0.45 * drift
    out["head_importance"] = np.abs(np.random.default_rng(seed + 7).gamma(2.0, 0.5, (layers, heads))) * (1 + 0.3 * p)
    return {k: v.astype(np.float32) for k, v in out.items()}


def synthetic_maps(tokens, *, layers=L, heads=H, seed=0):
    """``[layers, heads, T, T]`` row-stochastic maps whose patterns follow :func:`head_types`."""
    T = len(tokens)
    rng = np.random.default_rng(seed + 11)
    types = head_types(layers, heads, seed)
    cls = np.array([t == "[CLS]" for t in tokens])
    sep = np.array([t == "[SEP]" for t in tokens])
    punct = np.array([t in (".", ",") for t in tokens])
    maps = np.zeros((layers, heads, T, T))
    eye = np.eye(T)
    for (l, k), t in np.ndenumerate(types):
        logits = rng.normal(0, 0.6, (T, T))
        if t == "cls":
            logits[:, cls] += 3.2
        elif t == "sep":
            logits[:, sep] += 3.0
        elif t == "punct":
            logits[:, punct] += 2.8
        elif t == "prev":
            logits += 4.0 * np.eye(T, k=-1)
        elif t == "next":
            logits += 4.0 * np.eye(T, k=1)
        elif t == "self":
            logits += 3.5 * eye
        elif t == "broad":
            logits *= 0.2
        else:
            logits[:, sep] += 1.2
            logits += 1.2 * eye
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        maps[l, k] = e / e.sum(axis=1, keepdims=True)
    return maps.astype(np.float32)


def segments_of(tokens):
    seg, out = 0, []
    for t in tokens:
        out.append(seg)
        if t == "[SEP]":
            seg = 1
    return out


#: The baseline F1 that the demo run's "uniform" ablation reports beside its accuracy.
ABLATION_F1 = 0.8125


def ablation_tables(*, layers=L, heads=H, seed=0):
    rng = np.random.default_rng(seed + 3)
    baseline = 0.8612
    delta = rng.normal(-0.004, 0.006, (layers, heads))
    delta[1, 4], delta[4, 2], delta[5, 9] = -0.041, -0.027, 0.012
    se = 0.0045 + 0.002 * rng.random((layers, heads))
    heads_t = np.stack(
        [baseline + delta, delta, delta - 1.96 * se, delta + 1.96 * se, np.minimum(1, 2 * np.exp(-np.abs(delta / se)))],
        -1,
    )
    ldelta = np.array([-0.085, -0.031, -0.012, -0.006, 0.004, -0.019][:layers] + [-0.01] * max(0, layers - 6))
    lse = np.full(layers, 0.008)
    layers_t = np.stack(
        [
            baseline + ldelta,
            ldelta,
            ldelta - 1.96 * lse,
            ldelta + 1.96 * lse,
            np.minimum(1, 2 * np.exp(-np.abs(ldelta / lse))),
        ],
        -1,
    )
    frac = np.linspace(0, 0.9, 10)
    pruning = np.stack([frac, baseline - 0.002 * frac - 0.45 * np.clip(frac - 0.4, 0, None) ** 1.6], -1)
    return baseline, heads_t.astype(np.float32), layers_t.astype(np.float32), pruning.astype(np.float32)


#: The synthetic pruning curves' importance order holds within δ = 0.01 through 29 of 72 heads (see below).
CURVES_ANSWER = 29


def ablation_curves(baseline: float, *, layers=L, heads=H) -> dict:
    """The ``curves`` summary content of :func:`curves_result`."""
    return curves_result(baseline, layers=layers, heads=heads).curves_summary()


def curves_result(baseline: float, *, layers=L, heads=H):
    """An AblationResult with pruning curves with known intervals for the "uniform" tables: the importance order's Δ falls as
    ``-0.002 f - 0.45 (f - 0.4)^1.6`` past 40% of heads with a ±0.008 interval, so with δ = 0.01 its steps hold
    up to 29 of 72 heads and fail from 36 on; the iterative order sits 0.001 higher; three random orders fall
    steeper (-0.01 f, -0.02 f, -0.03 f): they hold through 14, 7 and 0 heads."""
    from bertwatch.report.result import AblationResult

    total = layers * heads
    pruned = [7, 14, 22, 29, 36, 43, 50, 58, 65]

    def entries(shift: float, slope: float) -> list[dict]:
        out = []
        for k in pruned:
            f = k / total
            d = shift - slope * f - 0.45 * max(f - 0.4, 0.0) ** 1.6
            out.append(
                {
                    "pruned": k,
                    "fraction": f,
                    "value": baseline + d,
                    "delta": d,
                    "ci_low": d - 0.008,
                    "ci_high": d + 0.008,
                    "p": 0.5,
                    "heads": [],
                }
            )
        return out

    result = AblationResult(
        task="sst2",
        mode="uniform",
        metric="accuracy",
        num_examples=872,
        baseline=baseline,
        heads=np.zeros((layers, heads, 5)),
        layers=np.zeros((layers, 5)),
        pruning=entries(0.0, 0.002),
        pruning_iterative=entries(0.001, 0.002),
        pruning_random=[entries(0.0, 0.01 * (r + 1)) for r in range(3)],
        config={"delta": 0.01, "confidence": 0.95, "greater_is_better": True},
    )
    return result


#: The SST-2 dev share of the majority class (positive), the demo ablation's constant answer.
ABLATION_MAJORITY = 444 / 872


def ablation_trivial(baseline: float):
    """The demo ablation against always answering 'positive' (444 of 872): its accuracy ``baseline``, well above."""
    from bertwatch.core.baseline import ConstantComparison

    return ConstantComparison(
        metric="accuracy",
        label="accuracy",
        rows=("model",),
        classes=("negative", "positive"),
        num_examples=872,
        constant=1,
        value=ABLATION_MAJORITY,
        values=[baseline],
        delta=[baseline - ABLATION_MAJORITY],
        ci_low=[baseline - ABLATION_MAJORITY - 0.03],
        ci_high=[baseline - ABLATION_MAJORITY + 0.03],
        shares=[[0.47, 0.53]],
        label_shares=[1 - ABLATION_MAJORITY, ABLATION_MAJORITY],
        n_resamples=1000,
        what="its ablation figures",
    )


def embedding_coords(*, layers=L, heads=H, seed=0):
    rng = np.random.default_rng(seed + 5)
    angles = np.linspace(0, 2 * np.pi, layers, endpoint=False)
    centres = np.stack([np.cos(angles), np.sin(angles)], -1) * 1.0
    coords = np.repeat(centres, heads, axis=0) + 0.28 * rng.standard_normal((layers * heads, 2))
    return coords.astype(np.float32)


def word_class_values(step, *, seed=0):
    """A synthetic ``word_classes`` series step: four classes' mean share and their uniform-head share."""
    uniform = {"noun": 0.22, "verb": 0.1, "subj": 0.08, "obj": 0.06}
    out = {}
    for k, (name, base) in enumerate(uniform.items()):
        out[name] = base * (1 + 0.5 * np.sin(step / 10 + k + seed))
        out[f"{name}_uniform"] = base
    return out


#: What the demo run ``finetune-a`` records of its probe set (``finetune-b`` records nothing, as older runs).
PROBE = {"max_length": 128, "truncated": 3, "examples": 32, "longest": 128}


def write_run(
    run_dir,
    *,
    seed=0,
    steps=STEPS,
    attention=True,
    ablation=True,
    clustering=True,
    tokens=(TOKENS_A, TOKENS_B),
    probe=None,
):
    """A complete bertwatch run: grids at every step, attention maps at every other step, ablation, clusters."""
    with SummaryWriter(str(run_dir)) as w:
        for i, step in enumerate(steps):
            grids = synthetic_grids(step, seed=seed, max_step=steps[-1])
            w.add_head_grids(grids, step, walltime=1_700_000_000 + step, probe=probe)
            shares = rules.pattern_shares(rules.pattern_codes(grids))
            w.add_named_values(PATTERN_SERIES, shares, step, walltime=1_700_000_000 + step)
            w.add_named_values(
                WORD_CLASS_SERIES, word_class_values(step, seed=seed), step, walltime=1_700_000_000 + step
            )
            if clustering:
                moved = embedding_coords(seed=seed) + np.float32(0.01 * i)
                w.add_embedding("js_mds_training", moved, L, H, step=step, walltime=1_700_000_000 + step)
            if attention and (i % 2 == 0 or step == steps[-1]):
                examples = [(t, synthetic_maps(t, seed=seed + step), segments_of(t)) for t in tokens]
                w.add_attention_maps(examples, step, walltime=1_700_000_000 + step)
        if ablation:
            baseline, heads_t, layers_t, pruning = ablation_tables(seed=seed)
            w.add_ablation(  # says what it measured; the "zero" tables below name no task type
                "uniform",
                "accuracy",
                baseline,
                872,
                heads_t,
                layers_t,
                pruning,
                step=steps[-1],
                task_type="sequence-classification",
                baseline_metrics={"accuracy": baseline, "f1": ABLATION_F1},
                curves=ablation_curves(baseline),
                trivial=ablation_trivial(baseline).to_json(),
            )
            w.add_ablation(
                "zero",
                "accuracy",
                baseline,
                872,
                heads_t * np.float32(1.3),
                layers_t * np.float32(1.2),
                None,
                step=steps[-1],
            )
        if clustering:
            w.add_embedding("js_mds", embedding_coords(seed=seed), L, H, step=steps[-1])


def write_xss_run(run_dir):
    """A run whose name, tokens and values are hostile: HTML payloads, NaN and infinities."""
    grids = synthetic_grids(STEPS[-1], seed=3)
    grids["sep_to_sep"][0, 0] = np.nan
    grids["head_importance"][5, 11] = np.inf
    grids["head_importance"][5, 10] = -np.inf
    tokens = ["[CLS]", XSS, "<script>window.__xss=1</script>", ".", "[SEP]"]
    with SummaryWriter(str(run_dir)) as w:
        w.add_head_grids(grids, 0, walltime=1_600_000_000)
        w.add_attention_maps([(tokens, synthetic_maps(tokens, seed=3), None)], 0, walltime=1_600_000_000)


def write_demo_logdir(root):
    """``root/finetune-a`` (full), ``root/finetune-b`` (grids only, other seed), ``root/<xss>``."""
    root = os.fspath(root)
    write_run(os.path.join(root, "finetune-a"), seed=0, probe=PROBE)
    write_run(os.path.join(root, "finetune-b"), seed=1, attention=False, ablation=False, clustering=False)
    write_xss_run(os.path.join(root, XSS_RUN))
    return root


# ------------------------------------------------------------------------------------------------------
# In-process TensorBoard


def make_wsgi_app(logdir, samples=0):
    """TensorBoardWSGI with only the bertwatch plugin over a MultiplexerDataProvider (Python loader)."""
    from tensorboard.backend import application
    from tensorboard.backend.event_processing import data_provider as mdp
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    from tensorboard.plugins import base_plugin

    from bertwatch.tb.plugin import BertwatchPlugin

    mux = pem.EventMultiplexer(tensor_size_guidance={"bertwatch": samples})
    mux.AddRunsFromDirectory(os.fspath(logdir))
    mux.Reload()
    provider = mdp.MultiplexerDataProvider(mux, os.fspath(logdir))
    ctx = base_plugin.TBContext(data_provider=provider, logdir=os.fspath(logdir))
    plugin = BertwatchPlugin(ctx)
    app = application.TensorBoardWSGI([plugin], data_provider=provider)
    return app, mux, plugin


# ------------------------------------------------------------------------------------------------------
# A real tensorboard process


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers, r.read()


def http_json(url, timeout=10):
    return json.loads(http_get(url, timeout)[2])


@contextlib.contextmanager
def tensorboard_server(logdir, *, extra=(), timeout=60):
    """Start ``python -m tensorboard.main`` on a free port; yields its base URL; stops it by PID."""
    log = open(os.path.join(os.fspath(logdir), os.pardir, "tensorboard.log"), "wb")
    for _attempt in range(3):
        port = free_port()
        cmd = [
            sys.executable, "-m", "tensorboard.main", "--logdir", os.fspath(logdir), "--host", "127.0.0.1",
            "--port", str(port), "--reload_interval", "1", *extra,
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.PIPE)
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + timeout
        ok = False
        while time.time() < deadline and proc.poll() is None:
            try:
                listing = http_json(base + "/data/plugins_listing", timeout=2)
                if listing.get("bertwatch", {}).get("enabled"):
                    ok = True
                    break
            except OSError:
                pass
            time.sleep(0.2)
        if ok:
            break
        proc.terminate()
        proc.wait(10)
    else:
        log.close()
        raise RuntimeError("tensorboard did not start; see tensorboard.log next to the logdir")
    try:
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def wait_for(predicate, timeout=20.0, interval=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def chromium_context(playwright, profile_dir):
    """A headless persistent context of Debian's Chromium (``CHROMIUM``) at ``VIEWPORT``, its profile in
    ``profile_dir``; fails the test (never skips) when Chromium is missing, saying how to install it."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests need Debian's Chromium. Install it with "
            "`apt-get update && apt-get install -y chromium` (or `make browser`); never `playwright install`.",
            pytrace=False,
        )
    return playwright.chromium.launch_persistent_context(
        str(profile_dir), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, viewport=VIEWPORT
    )


def screenshot_dir(tmp_path_factory):
    """Where the browser tests save their screenshots: $BERTWATCH_SCREENSHOTS (created if needed; the docs use
    docs/img), else a fresh temporary folder."""
    d = os.environ.get("BERTWATCH_SCREENSHOTS")
    path = Path(d) if d else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path

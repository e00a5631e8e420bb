"""Benchmark of the bertwatch TensorBoard plugin at scale.

A run with 5,000 logged steps of 15 statistics (12 grid statistics, 2 norm-based masses, head_importance) at bert-base shape
(12 x 12), written with bertwatch.tb.writer.summary.SummaryWriter and served by a real ``tensorboard`` process with
``--samples_per_plugin=bertwatch=0`` (keep every step). Prints:

* route latency (cold = first read of a series, warm = median / p95 of repeated calls); target < 200 ms;
* in the browser (Debian Chromium via Playwright): time from opening the page to the rendered heatmap and to its
  behaviour labels, and from moving the step slider to the re-rendered heatmap and to its labels; target < 1 s;
* live: time from a new step written to disk until the open page shows it (TensorBoard's reload interval
  plus the page's 3 s polling).

Usage:  .venv/bin/python benchmarks/bench_plugin.py [--steps 5000] [--logdir DIR] [--no-browser]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bertwatch.tb.writer.summary import SummaryWriter  # noqa: E402
from tests.support.tb_helpers import http_json, tensorboard_server  # noqa: E402

STATS = (
    "cls_mass", "sep_mass", "punct_mass", "sep_to_sep", "sep_mass_kovaleva", "self", "prev", "next",
    "entropy", "cls_entropy", "drift_cosine", "drift_js", "head_importance", "cls_mass_norm", "sep_mass_norm",
)  # fmt: skip
L, H = 12, 12
RUN = "bert-base"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


# Move the Heads view's step slider to index idx (steps are 0, 1, 2, ...: index == step); ms until the heatmap shows
# that step, or with labels also its behaviour labels.
SLIDER_MOVE = """async ([idx, labels]) => {
  const slider = document.querySelector('#step-slider');
  const t0 = performance.now();
  slider.value = String(idx);
  slider.dispatchEvent(new Event('input', {bubbles: true}));
  const shown = () => document.querySelector('#grid-step').dataset.step === String(idx);
  const legend = () => document.querySelector('#labels-legend');
  const done = () => shown() && (!labels || (legend() && legend().dataset.pending !== 'true'));
  while (!done()) await new Promise((r) => requestAnimationFrame(r));
  return performance.now() - t0;
}"""


def grids_for(step, rng):
    g = {s: rng.random((L, H), dtype=np.float32) for s in STATS}
    g["entropy"] *= 4.5
    g["cls_entropy"] *= 4.5
    return g


def write_logdir(logdir: Path, steps: int) -> float:
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    with SummaryWriter(str(logdir / RUN)) as w:
        for step in range(steps):
            w.add_head_grids(grids_for(step, rng), step, walltime=1_700_000_000 + step)
    return time.perf_counter() - t0


def route(base, name, **params):
    return f"{base}/data/plugin/bertwatch/{name}?{urllib.parse.urlencode(params)}"


def timed(url):
    t0 = time.perf_counter()
    data = http_json(url, timeout=120)
    return (time.perf_counter() - t0) * 1000, data


def bench_routes(base, steps):
    tag = "bertwatch/heads/cls_mass"
    rng = np.random.default_rng(1)
    cases = [
        ("tags", {}),
        ("steps", {"run": RUN, "tag": tag}),
        ("grid (latest)", {"run": RUN, "tag": tag}),
        ("grid (step)", None),
        ("trajectory", {"run": RUN, "tag": tag, "layer": 5, "head": 7}),
        ("layer_means", {"run": RUN, "tag": tag}),
        ("labels", {"run": RUN, "step": steps - 1}),
        ("mass_gap (latest)", {"run": RUN}),
        ("mass_gap (step)", None),
    ]
    rows = []
    # cold: the first read of a series (the plugin then caches it until the series changes)
    cold_ms, _ = timed(route(base, "grid", run=RUN, tag="bertwatch/heads/entropy", step=steps // 2))
    rows.append(("grid, cold series (first read of 5,000 steps)", cold_ms, cold_ms, 1))
    # labels and mass_gap at the latest step read that step of each grid; at an earlier one, the whole series
    for name, what in (("labels", "6 grids"), ("mass_gap", "norm grids")):
        for at, step in (("latest", steps - 1), ("earlier", steps // 3)):
            ms, _ = timed(route(base, name, run=RUN, step=step))
            rows.append((f"{name}, cold, {at} step ({what})", ms, ms, 1))
    for name, params in cases:
        times, _size = [], 0
        for i in range(25):
            p = params if params is not None else {"run": RUN, "tag": tag, "step": int(rng.integers(0, steps))}
            if name == "mass_gap (step)":
                p = {"run": RUN, "step": int(rng.integers(0, steps))}
            url = route(base, name.split(" ")[0], **p)
            ms, data = timed(url)
            if i:  # the first call may fill the cache
                times.append(ms)
        times.sort()
        rows.append((name, statistics.median(times), times[int(0.95 * (len(times) - 1))], len(times)))
    return rows


def bench_browser(base, logdir):
    from playwright.sync_api import sync_playwright

    out = {}
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 900},
        )
        page = ctx.pages[0] if ctx.pages else ctx.new_page()
        steps = http_json(route(base, "steps", run=RUN, tag="bertwatch/heads/cls_mass"))["steps"]
        last = steps[-1]
        t0 = time.perf_counter()
        page.goto(base + "/#bertwatch")
        frame = page.wait_for_selector("iframe", timeout=60000).content_frame()
        frame.wait_for_selector("#heads-heatmap .cell", timeout=60000)
        out["page open -> heatmap (wall, incl. TensorBoard's own UI)"] = (time.perf_counter() - t0) * 1000
        tm = frame.evaluate("window.__bertwatch.timings")
        out["plugin render() -> heatmap"] = tm["firstHeatmap"] - tm["renderStart"]
        out["  of which /grid fetch + DOM"] = tm["lastGrid"]["fetchAndRenderMs"]
        frame.wait_for_selector("#heads-heatmap .cell .mark", timeout=60000)
        out["plugin render() -> behaviour labels on the heatmap"] = (
            frame.evaluate("performance.now()") - tm["renderStart"]
        )
        # slider (steady state): move to random steps, time input event -> heatmap showing that step
        rng = np.random.default_rng(2)
        samples = [frame.evaluate(SLIDER_MOVE, [int(rng.integers(0, len(steps) - 1)), False]) for _ in range(10)]
        out["slider move -> heatmap (median of 10)"] = statistics.median(samples)
        out["slider move -> heatmap (max of 10)"] = max(samples)
        # then -> the behaviour labels of that step on the heatmap (a legend whose counts are not pending)
        samples = [frame.evaluate(SLIDER_MOVE, [int(rng.integers(0, len(steps) - 1)), True]) for _ in range(10)]
        out["slider move -> behaviour labels (median of 10)"] = statistics.median(samples)
        # live: write one more step, time until the page shows it
        frame.check("#follow-latest")
        frame.wait_for_function(f"() => document.querySelector('#grid-step').dataset.step === '{last}'")
        rng2 = np.random.default_rng(3)
        t0 = time.perf_counter()
        with SummaryWriter(str(logdir / RUN)) as w:
            w.add_head_grids(grids_for(last + 1, rng2), last + 1)
        frame.wait_for_function(
            f"() => document.querySelector('#grid-step').dataset.step === '{last + 1}'", timeout=60000
        )
        out["live: step written -> shown (reload 1 s + poll 3 s)"] = (time.perf_counter() - t0) * 1000
        ctx.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--logdir", help="reuse / keep this log directory (default: a temporary one)")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()

    tmp = None
    if args.logdir:
        logdir = Path(args.logdir)
    else:
        tmp = tempfile.TemporaryDirectory()
        logdir = Path(tmp.name) / "logs"
    if not (logdir / RUN).exists():
        secs = write_logdir(logdir, args.steps)
        print(f"wrote {args.steps} steps x {len(STATS)} statistics ({L}x{H}) in {secs:.1f} s")
    size = sum(f.stat().st_size for f in (logdir / RUN).iterdir())
    print(f"event files: {size / 1e6:.1f} MB")

    def serve():
        return tensorboard_server(logdir, extra=["--samples_per_plugin=bertwatch=0"], timeout=300)

    def wait_loaded(base):
        def loaded():
            info = http_json(route(base, "tags"))["runs"].get(RUN, {})
            return len(info) == len(STATS) and all(v["maxStep"] >= args.steps - 1 for v in info.values())

        while not loaded():
            time.sleep(0.5)

    t0 = time.perf_counter()
    with serve() as base:
        wait_loaded(base)
        print(f"tensorboard up and every step loaded in {time.perf_counter() - t0:.1f} s")
        served = http_json(route(base, "steps", run=RUN, tag="bertwatch/heads/cls_mass"))["steps"]
        print(f"steps served per series: {len(served)} (all kept: {len(served) == served[-1] + 1})")
        print("\nroute latency (ms; target < 200)")
        print(f"  {'route':50s} {'median':>8s} {'p95':>8s} {'n':>4s}")
        for name, med, p95, count in bench_routes(base, args.steps):
            print(f"  {name:50s} {med:8.1f} {p95:8.1f} {count:4d}")

    if not args.no_browser:
        if not os.path.exists(CHROMIUM):
            sys.exit(f"{CHROMIUM} is missing: apt-get install -y chromium (or pass --no-browser)")
        with serve() as base:  # a fresh server: the page's first reads are cold
            wait_loaded(base)
            print("\nbrowser, fresh server (ms; target < 1000 from data to rendered heatmap)")
            for name, ms in bench_browser(base, logdir).items():
                print(f"  {name:58s} {ms:8.1f}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()

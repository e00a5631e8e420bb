"""Cost of the verdict's loss tap (``bertwatch.callbacks.judging.LossTap``): training steps of a MiniLM-shaped sequence
classifier (6 layers x 12 heads, hidden 384, random weights: timings do not depend on them) with the tap's forward
hook on the model and a window read at the end of each step (the most often it reads: a run of up to 200 steps),
against the same steps without it, the two interleaved ``--rounds`` times. Prints the fastest round of each and
their ratio; target ≤ 1.01 (the tap must cost nothing a user could see against the 2% overhead budget).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_loss_tap.py --rounds 5 [--steps 10] [--batch 16] [--length 64]
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    opts = parser.parse_args()

    import transformers as T

    from bertwatch.callbacks.judging import LossTap

    torch.set_num_threads(opts.threads)
    torch.manual_seed(0)
    config = T.BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
                          num_labels=2)  # fmt: skip
    model = T.BertForSequenceClassification(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch = {
        "input_ids": torch.randint(1000, 2000, (opts.batch, opts.length)),
        "attention_mask": torch.ones(opts.batch, opts.length, dtype=torch.long),
        "labels": torch.randint(0, 2, (opts.batch,)),
    }

    def steps(tapped: bool) -> float:
        tap = LossTap(model) if tapped else None
        start = time.perf_counter()
        for step in range(1, opts.steps + 1):
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if tap is not None and tap.end_step(step, 1e-5):
                tap.read()
        seconds = time.perf_counter() - start
        if tap is not None:
            tap.close()
        return seconds

    steps(False)  # warm-up
    times: dict[str, list[float]] = {"without": [], "with the tap": []}
    for _ in range(opts.rounds):
        times["without"].append(steps(False))
        times["with the tap"].append(steps(True))
    best = {name: min(t) for name, t in times.items()}
    for name, seconds in best.items():
        print(f"{name}: fastest {seconds:.3f} s for {opts.steps} steps")
    print(f"with the tap / without: {best['with the tap'] / best['without']:.3f} (target <= 1.01)")


if __name__ == "__main__":
    main()

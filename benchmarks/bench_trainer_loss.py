"""Cost of taking the gradient statistics with the Trainer's own loss (one forward and backward per probe example
alone, ``bertwatch.callbacks.trainer_loss``) against the model's own loss (one forward and backward per probe
batch), on one probe batch of a MiniLM-shaped sequence classifier (6 layers x 12 heads, hidden 384, random weights:
timings do not depend on them). Prints both times and their ratio; there is no target, the ratio is what a user
pays for a custom training loss.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_trainer_loss.py --repeats 3 [--batch 16] [--length 64]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch


def _time(fn, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    opts = parser.parse_args()

    import torch.nn.functional as F
    import transformers as T

    from bertwatch.callbacks.trainer_loss import gradient_loss
    from bertwatch.heads.gradients.importance import gradient_stats
    from bertwatch.heads.roles import TokenRoles

    class SmoothingTrainer(T.Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            loss = F.cross_entropy(outputs.logits, labels, label_smoothing=0.1)
            return (loss, outputs) if return_outputs else loss

    torch.manual_seed(0)
    config = T.BertConfig(
        hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536, num_labels=2
    )
    model = T.BertForSequenceClassification(config).eval()
    ids = torch.randint(1000, 20000, (opts.batch, opts.length))
    mask = torch.ones_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(0, 2, (opts.batch,))}
    real = mask.bool()
    none = torch.zeros_like(real)
    roles = TokenRoles(real=real, cls=none, sep=none, punct=none, segment=None)
    with tempfile.TemporaryDirectory() as out:
        args = T.TrainingArguments(output_dir=out, report_to="none", use_cpu=True)
        trainer = SmoothingTrainer(model=model, args=args)
        loss = gradient_loss(None, trainer, args, model)
        own = _time(lambda: gradient_stats(model, batch, roles), opts.repeats)
        per_example = _time(lambda: gradient_stats(model, batch, roles, **loss.arguments()), opts.repeats)
    print(f"MiniLM-shaped, batch {opts.batch} x {opts.length} tokens, {torch.get_num_threads()} threads")
    print(f"model's own loss (batched):         {own:.3f} s")
    print(f"Trainer's loss (each example alone): {per_example:.3f} s")
    print(f"ratio: {per_example / own:.2f}")


if __name__ == "__main__":
    main()

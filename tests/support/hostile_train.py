"""A tiny BERT trained "forever" with bertwatch probing every step; killed from outside by the hostile tests.

python -m tests.support.hostile_train LOGDIR OUTPUT_DIR            # trains until killed, prints "step N"
python -m tests.support.hostile_train LOGDIR OUTPUT_DIR PROBES     # one step with PROBES probe texts, prints peak RSS
"""

from __future__ import annotations

import sys

import torch
import transformers as T

from bertwatch.callbacks import BertWatchCallback, ExpertOptions
from tests.support.strict import strict
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, training_args


class _Progress(T.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        print(f"step {state.global_step}", flush=True)


def _peak_rss_mib() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    logdir, output_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    tok = tiny_tokenizer()
    if len(sys.argv) > 3:
        texts = [f"good movie number {i} , fun . the plot was not dull" for i in range(int(sys.argv[3]))]
        callback = strict(
            BertWatchCallback,
            every_n_steps=0,
            logging_dir=logdir,
            probe_texts=texts,
            num_probe_examples=len(texts),
            num_maps=0,
            stats=("cls_mass", "entropy", "drift_cosine", "drift_js"),
        )
        T.Trainer(
            model=tiny_bert(tok),
            args=training_args(output_dir, max_steps=1),
            train_dataset=toy_dataset(tok, 8, 0),
            processing_class=tok,
            data_collator=T.DataCollatorWithPadding(tok),
            callbacks=[callback],
        ).train()
        assert len(callback.history) == 2
        print(f"peak_rss_mib {_peak_rss_mib():.1f}", flush=True)
        return
    trainer = T.Trainer(
        model=tiny_bert(tok),
        args=training_args(output_dir, max_steps=100_000, eval_strategy="no"),
        train_dataset=toy_dataset(tok, 64, 0),
        eval_dataset=toy_dataset(tok, 16, 1),
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=[
            BertWatchCallback(
                every_n_steps=1, logging_dir=logdir, num_maps=2, expert=ExpertOptions(maps_every_n_steps=2)
            ),
            _Progress(),
        ],
    )
    trainer.train()


if __name__ == "__main__":
    main()

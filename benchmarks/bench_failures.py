"""Will this fine-tune fail? Fine-tunes of the packaged MiniLM drawn from their index (``--draw``: the task in turn,
SST-2, MRPC, RTE, CoLA, QNLI and, in the "unseen" draw, STS-B, a regression; a learning rate log-uniform over a
range from too low to learn in a short run to far too high; the length, batch size, sequence length and schedule,
linear, cosine or constant; the seed = the index; every other round of the tasks evaluates every 20% of its steps),
each watched by ``BertWatchCallback()`` at its defaults and labelled from its final score on dev examples it never
saw; the verdict (``core.verdict``) replayed on each run's recorded evidence at 10%, 20% and 30% of training and at
the end, against three baselines read at the same step: the early dev score (Dodge et al. 2020's early stopping),
the last logged training loss and its least-squares trend.

    nice python benchmarks/bench_failures.py --draw learning --runs 0-99 --jobs 2 --threads 1 --out failures.jsonl
    python benchmarks/bench_failures.py --out failures.jsonl --report            # the figures of what finished

The protocol: the verdict's rules are frozen at a named commit before any run is recorded, and the figures are of
those runs only. Each task's dev set is shuffled once and split into two halves of at most ``--dev-size`` / 2: the
*seen* half is the Trainer's ``eval_dataset`` (what an evaluating run, bertwatch and the early dev score read), the
*unseen* half defines the outcome and nothing else reads it (QNLI has no training file here: its dev set gives the
training rows too). A run **failed** when its final score on the unseen half (accuracy; Matthews correlation on
CoLA; Spearman's on STS-B, 0 for any constant) is not better than the majority class's beyond chance: the 95% paired
bootstrap interval (``--boot`` resamples) of (run's score − majority's) reaches 0. It **learned** when it is at
least 5 points above the majority's. Each record keeps the evidence the live verdict read (``Evidence.as_dict``:
every step's training loss from the loss tap, the run-health values and alerts of each probe pass, the evaluations)
and the verdict it judged live at each step, so the replay is checked against the live verdict. Figures, each with a
95% bootstrap interval over runs: the ROC AUC of the verdict's rank (failing first, then the smallest margin of
learning) and of each baseline as failure scores at 10/20/30%; at the end, the recall of "failing" on the failed
runs and the share of the runs that learned that end "at risk" or worse (false alarms); slice by slice. Training:
AdamW, 10% warm-up (none with the constant schedule), ``steps`` × batch training examples (a smaller set is gone
round again); the probe set: 32 training examples the run never trains on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import default_glue_dir, minilm_path, train_quietly  # noqa: E402
from _failures_replay import (  # noqa: E402
    BATCH,
    FRACTIONS,
    PROBE,
    REGRESSION,
    auc,
    bootstrap,
    failed_by_score,
    interval,
    learned_by_score,
    metric,
    scores,
    verdict_at,
)
from _failures_replay import share as share_of  # noqa: E402


def _encode(tok, rows: list[dict], max_length: int) -> list[dict]:
    """The rows tokenized (truncated to ``max_length``), one dict per example with its "label": a plain list, which
    the Trainer, its padding collator and bertwatch's ``probe_dataset`` all take (no ``datasets`` needed)."""
    pairs = [r.get("text_pair") for r in rows]
    texts = [r["text"] for r in rows]
    encoded = tok(texts, pairs if any(p is not None for p in pairs) else None, truncation=True, max_length=max_length)
    label = float if rows and isinstance(rows[0]["label"], float) else int  # a regression's score, else a class
    return [{**{k: v[i] for k, v in encoded.items()}, "label": label(r["label"])} for i, r in enumerate(rows)]


_metric = metric  # the score a run is labelled by (and evaluates with)


def dev_predictions(model, tok, dev: list[dict], batch_size: int = 64) -> list[float]:
    """Class predictions (a regression: scores) on ``dev`` (tokenized rows), in eval mode and without gradients,
    on the model's device; the model's mode is restored (no random number is drawn, so training is unchanged)."""
    import torch
    from transformers import DataCollatorWithPadding

    collate = DataCollatorWithPadding(tok)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[float] = []
    with torch.no_grad():
        for start in range(0, len(dev), batch_size):
            rows = [{k: v for k, v in row.items() if k != "label"} for row in dev[start : start + batch_size]]
            batch = {k: v.to(device) for k, v in collate(rows).items()}
            logits = model(**batch).logits
            out.extend(logits[:, 0].tolist() if logits.shape[-1] == 1 else logits.argmax(-1).tolist())
    model.train(was_training)
    return out


def splits(task: str, glue_dir: str | None, half: int) -> tuple[list[dict], list[dict], list[dict]]:
    """The training rows and two disjoint halves of the dev set, shuffled once per task (the same for every run):
    ``seen``, the Trainer's ``eval_dataset`` (what an evaluating run, bertwatch and the early dev score read), and
    ``unseen``, which defines the run's outcome and nothing else reads; each at most ``half`` rows. QNLI has no
    training file here: its dev set is split three ways (the first ``2 * half`` shuffled rows are the halves, the
    rest the training rows)."""
    from bertwatch.data.glue import load_glue

    dev = load_glue(task, "dev", glue_dir)
    order = np.random.default_rng([99, *task.encode()]).permutation(len(dev))
    dev = [dev[i] for i in order]
    if task == "qnli":
        return dev[2 * half :], dev[:half], dev[half : 2 * half]
    middle = len(dev) // 2
    return load_glue(task, "train", glue_dir), dev[:middle][:half], dev[middle:][:half]


def run_one(config: dict, opts: argparse.Namespace) -> dict:
    """One fine-tune of ``config`` (:func:`configs`) with ``BertWatchCallback()`` at its defaults; its JSON record
    holds the outcome (the final predictions on the unseen dev half), the baselines' inputs (the predictions on the
    seen half at 10/20/30% of training), the evidence the live verdict read (``Evidence.as_dict``: the tapped
    training loss of every step, the probe passes' run-health values, the alerts, the evaluations) and the live
    verdict at each step it was judged, so any version of the verdict can be replayed on it and the replay checked
    against what the run said."""
    import tempfile

    import torch
    import transformers as T

    from bertwatch.callbacks import BertWatchCallback, watch

    task, seed, lr, steps, batch = config["task"], config["seed"], config["lr"], config["steps"], config["batch"]
    length = config["max_length"]
    torch.set_num_threads(opts.threads)
    path = minilm_path()
    tok = T.AutoTokenizer.from_pretrained(path)
    rows, seen_rows, unseen_rows = splits(task, opts.glue_dir, opts.dev_size // 2)
    used = min(steps * batch, len(rows) - PROBE)  # a small training set (MRPC, RTE) is trained on for epochs
    train = _encode(tok, rows[:used], length)
    probe_rows = rows[used:][:PROBE]
    probe = _encode(tok, probe_rows, length)
    seen, unseen = _encode(tok, seen_rows, length), _encode(tok, unseen_rows, length)
    checkpoints = {max(1, round(steps * f)) for f in FRACTIONS}
    early: dict[int, list[int]] = {}
    verdicts: dict[int, list] = {}

    class DevAt(T.TrainerCallback):
        """The seen half's predictions at 10/20/30% of training (the early-stopping baseline) and, after
        bertwatch's own events, the last verdict it judged at each step."""

        def _note(self):
            v = cb.alerting.verdict
            if v is not None:
                verdicts[v.step] = [v.level, v.evidence, v.label, list(v.reasons)]

        def on_step_end(self, args, state, control, model=None, **kwargs):
            self._note()
            if state.global_step in checkpoints:
                early[state.global_step] = dev_predictions(model, tok, seen)

        def on_log(self, args, state, control, **kwargs):
            self._note()

        def on_evaluate(self, args, state, control, **kwargs):
            self._note()

        def on_train_end(self, args, state, control, **kwargs):
            self._note()

    T.set_seed(seed)
    regression = task in REGRESSION
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=1 if regression else 2,
                                                                 dtype=torch.float32)  # fmt: skip
    cb = BertWatchCallback(probe_dataset=probe, num_probe_examples=PROBE, on_alert="none", quiet=True)
    metric = _metric(task)

    # as a user names them: eval_accuracy, eval_matthews_correlation, eval_spearmanr
    name = {"cola": "matthews_correlation", "stsb": "spearmanr"}.get(task, "accuracy")

    def compute_metrics(prediction):
        logits = np.asarray(prediction.predictions)
        answers = logits.reshape(len(logits), -1)[:, 0] if regression else logits.argmax(-1)
        return {name: float(metric(answers, prediction.label_ids))}

    evaluate = config["evaluate"]
    warmup = 0 if config["schedule"] == "constant" else max(1, round(steps * 0.1))
    with tempfile.TemporaryDirectory(prefix="bench_failures_") as out:
        args = T.TrainingArguments(
            output_dir=out, per_device_train_batch_size=batch, per_device_eval_batch_size=64, max_steps=steps,
            learning_rate=lr, warmup_steps=warmup, lr_scheduler_type=config["schedule"],
            logging_steps=opts.logging_steps, save_strategy="no", report_to="none", seed=seed, data_seed=seed,
            use_cpu=opts.device == "cpu", disable_tqdm=True, dataloader_num_workers=0,
            eval_strategy="steps" if evaluate else "no", eval_steps=max(1, round(steps * evaluate)) if evaluate else None,
        )  # fmt: skip
        trainer = T.Trainer(
            model=model, args=args, train_dataset=train, eval_dataset=seen if config.get("eval_set", True) else None,
            processing_class=tok,
            data_collator=T.DataCollatorWithPadding(tok), callbacks=[cb, DevAt()],
            compute_metrics=compute_metrics if evaluate else None,
        )  # fmt: skip
        trainer.remove_callback(T.trainer_callback.PrinterCallback)  # no dict printed a step
        watch(trainer)
        seconds = train_quietly(trainer)
    return {
        "key": run_key(config, opts),
        **config,
        "protocol": PROTOCOL,
        "seen_labels": [r["label"] for r in seen],
        "unseen_labels": [r["label"] for r in unseen],
        "final": dev_predictions(model, tok, unseen),
        "early": {str(k): v for k, v in sorted(early.items())},
        "evidence": cb.run_evidence.evidence.as_dict(),
        "live_verdicts": sorted([k, *v] for k, v in verdicts.items()),
        "measured": [[r.step, r.reason] for r in cb.pacing.log],
        "bertwatch_seconds": round(cb.pacing.meter.own, 2),
        "device": opts.device,
        "model": "packaged" if not os.environ.get("MINILM_PATH") else "copy with float16-rounded weights",
        "seconds": round(seconds, 1),
    }


#: The protocol the records were made under: the verdict frozen at the commit named in docs/performance.md, then
#: every run recorded; the dev set split into a seen half (the Trainer's eval set) and an unseen half (the outcome).
PROTOCOL = 2
#: What the runs are drawn from (:func:`configs`), by ``--draw``: "wide", every task in turn with short runs and
#: short sequences; "learning", SST-2 a third of the time and longer runs, so that more runs learn and both outcomes
#: are represented; "ending", shorter runs, a third without an eval_dataset; "unseen", STS-B (a regression, the one
#: task no rule was chosen on) in three runs of eight, beside the five others. CoLA and QNLI were never used to
#: choose the verdict's levels (its rank was chosen on all five).
DRAWS = {
    "wide": {"tasks": ("sst2", "mrpc", "rte", "cola", "qnli"), "steps": (30, 60, 100), "batches": (8, 16),
             "lengths": (32, 64), "lrs": (1e-5, 5e-3)},
    "learning": {"tasks": ("sst2", "qnli", "mrpc", "sst2", "cola", "rte"), "steps": (60, 100, 150),
                 "batches": (16,), "lengths": (48, 64), "lrs": (1e-5, 3e-3)},
    "ending": {"tasks": ("sst2", "qnli", "mrpc", "sst2", "cola", "rte"), "steps": (60, 100),
               "batches": (16,), "lengths": (48,), "lrs": (1e-5, 1e-3), "eval_modes": 3},
    "unseen": {"tasks": ("stsb", "sst2", "qnli", "stsb", "mrpc", "cola", "stsb", "rte"), "steps": (60, 100, 150),
               "batches": (16,), "lengths": (48, 64), "lrs": (1e-5, 1e-3), "eval_modes": 3},
}  # fmt: skip
SCHEDULES = ("linear", "cosine", "constant")
BATCHES = (8, 16)
LENGTHS = (32, 48, 64)


def configs(count: int, first: int = 0, draw: str = "wide") -> list[dict]:
    """Runs ``first`` .. ``first + count - 1`` of ``draw`` (``DRAWS``), each drawn from its own index (so any
    prefix is a fair sample and runs add up over sittings): the task in turn, a learning rate log-uniform in the
    draw's range, a length, a batch size, a sequence length and a schedule, the seed = the index; the runs of every
    other round of the tasks evaluate on the seen dev half every 20% of their steps, the rest never evaluate."""
    d = DRAWS[draw]
    out = []
    for i in range(first, first + count):
        rng = np.random.default_rng({"wide": [13, i], "learning": [17, i], "unseen": [23, i]}.get(draw, [19, i]))
        mode = (i // len(d["tasks"])) % d.get("eval_modes", 2)  # every 20%, never, (no eval_dataset)
        low, high = (math.log10(x) for x in d["lrs"])
        out.append(
            {
                "index": i,
                "draw": draw,
                "task": d["tasks"][i % len(d["tasks"])],
                "seed": i,
                "lr": float(f"{10 ** rng.uniform(low, high):.2g}"),
                "steps": int(rng.choice(d["steps"])),
                "batch": int(rng.choice(d["batches"])),
                "max_length": int(rng.choice(d["lengths"])),
                "schedule": str(rng.choice(SCHEDULES)),
                "evaluate": 0.2 if mode == 0 else 0.0,
            }
        )
        if "eval_modes" in d:
            out[-1]["eval_set"] = mode < 2
    return out


def run_key(config: dict, opts: argparse.Namespace) -> str:
    c = config
    draw = "" if c.get("draw", "wide") == "wide" else f"|{c['draw']}"
    return (
        f"v{PROTOCOL}{draw}|{c['task']}|seed={c['seed']}|lr={c['lr']:g}|steps={c['steps']}|batch={c['batch']}"
        f"|len={c['max_length']}|{c['schedule']}|eval={c['evaluate']:g}"
        + ("" if c.get("eval_set", True) else "|no-eval-set")
        + f"|dev={opts.dev_size}"
        + ("" if opts.device == "cpu" else f"|{opts.device}")
    )


# ------------------------------------------------------------------------------------------------- the figures

#: The slices of the runs the table is cut into: (name, which runs).
SLICES = (
    ("all runs", lambda r: True),
    ("evaluating every 20%", lambda r: bool(r["evaluate"])),
    ("never evaluating", lambda r: not r["evaluate"]),
    ("no eval_dataset", lambda r: not r.get("eval_set", True)),
    ("classification tasks", lambda r: r["task"] not in REGRESSION),
    ("tasks never used to choose the levels (CoLA, QNLI, STS-B)", lambda r: r["task"] in ("cola", "qnli", "stsb")),
    ("the task never used to choose any rule (STS-B)", lambda r: r["task"] in REGRESSION),
    *((name, lambda r, t=task: r["task"] == t) for task, name in
      (("sst2", "SST-2"), ("mrpc", "MRPC"), ("rte", "RTE"), ("cola", "CoLA"), ("qnli", "QNLI"))),
    *((f"{n} steps", lambda r, n=n: r["steps"] == n) for n in (30, 60, 100, 150)),
    ("learning rate 5e-4 or more", lambda r: r["lr"] >= 5e-4),
    ("learning rate below 5e-4", lambda r: r["lr"] < 5e-4),
    *((f"{s} schedule", lambda r, s=s: r["schedule"] == s) for s in SCHEDULES),
    *((f"batch {b}", lambda r, b=b: r["batch"] == b) for b in BATCHES),
    *((f"{n} tokens", lambda r, n=n: r["max_length"] == n) for n in LENGTHS),
    *((f'drawn "{d}"', lambda r, d=d: r.get("draw", "wide") == d) for d in DRAWS),
)  # fmt: skip
POINTS = (*FRACTIONS, None)  # None: the end of training
SCORES = ("verdict", "dev score", "training loss", "loss trend", "level", "cannot tell")


def run_table(records: list[dict], opts: argparse.Namespace) -> dict[str, np.ndarray]:
    """Per run: ``failed`` and ``learned`` (on the unseen dev half), and each score (``SCORES``) at each point of
    ``POINTS``, as arrays."""
    from bertwatch.core.verdict import VerdictSettings

    settings = VerdictSettings()
    table: dict[str, list] = {"failed": [], "learned": []}
    for r in records:
        table["failed"].append(failed_by_score(r["task"], r["final"], r["unseen_labels"], opts.boot))
        table["learned"].append(learned_by_score(r["task"], r["final"], r["unseen_labels"]))
        for point in POINTS:
            got = scores(r, point, settings)
            for name in SCORES:
                table.setdefault(f"{name}@{point}", []).append(got.get(name, math.nan))
    return {k: np.asarray(v, dtype=bool if k in ("failed", "learned") else float) for k, v in table.items()}


def _figures(t: dict[str, np.ndarray], boot: int) -> dict[str, tuple[float, float, float]]:
    failed, learned = t["failed"], t["learned"]
    out = {}
    for point in FRACTIONS:
        for name in SCORES[:4]:
            out[f"AUC {name}@{point}"] = bootstrap(auc, (t[f"{name}@{point}"], failed), boot)
    end = t["level@None"]
    out["recall"] = bootstrap(share_of, (end >= 2, failed), boot)
    out["false alarms"] = bootstrap(share_of, (end >= 1, learned), boot)
    out["false failing"] = bootstrap(share_of, (end >= 2, learned), boot)
    return out


def replay_agreement(records: list[dict]) -> tuple[int, int]:
    """How many of the live verdicts (each run's last at each step it judged) the replay gives again, of all."""
    same = total = 0
    for r in records:
        for step, level, *_ in r["live_verdicts"]:
            verdict = verdict_at(r, step)
            total += 1
            same += verdict is not None and verdict.level == level
    return same, total


def _without_eval_set(records: list[dict], t: dict[str, np.ndarray]) -> list[str]:
    """How the runs without an eval_dataset ended, by outcome: a line, or none without such runs."""
    rows = np.array([not r.get("eval_set", True) for r in records], dtype=bool)
    if not rows.any():
        return []
    from bertwatch.core.verdict import CANNOT_TELL, LEVELS

    words = []
    for outcome, among in (("failed", t["failed"]), ("learned", t["learned"])):
        keep = rows & among
        ended = [
            CANNOT_TELL if u else LEVELS[int(v)] for v, u in zip(t["level@None"][keep], t["cannot tell@None"][keep])
        ]
        counts = ", ".join(f"{ended.count(x)} {x}" for x in (*LEVELS[::-1], CANNOT_TELL) if x in ended)
        words.append(f"{int(keep.sum())} {outcome} ({counts or 'none'})")
    return [f"Without an eval_dataset ({int(rows.sum())} runs), the end verdict: {'; '.join(words)}."]


def report(records: list[dict], opts: argparse.Namespace) -> list[str]:
    """The figures of the finished runs, as Markdown: the AUC of each failure score at 10/20/30% and the end-of-run
    recall and false alarms on all runs, then the same figures slice by slice."""
    records = [r for r in records if r.get("protocol") == PROTOCOL]
    t = run_table(records, opts)
    failed, learned = t["failed"], t["learned"]
    same, total = replay_agreement(records)
    lines = [
        f"{len(records)} runs, each recorded after the verdict was frozen: {int(failed.sum())} failed (final score on "
        f"the unseen dev half not above the majority's beyond chance), {int(learned.sum())} learned (5 points or more "
        f"above it), {int((failed & learned).sum())} both (5 points above on too few examples to be beyond chance: "
        f"counted in the recall and in the false alarms alike), {len(records) - int((failed | learned).sum())} "
        f"neither; {sum(1 for r in records if not r.get('eval_set', True))} runs had no eval_dataset, the others the "
        f"seen half; {opts.boot} bootstrap resamples; the replay gives the live verdict at {same} of {total} judged steps",
        "",
        "| AUC [95% interval], failure score | 10% of training | 20% | 30% |",
        "|---|---|---|---|",
    ]
    figures = _figures(t, opts.boot)
    for name in SCORES[:4]:
        cells = [interval(figures[f"AUC {name}@{p}"]) for p in FRACTIONS]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    end, unknown = t["level@None"], t["cannot tell@None"]
    recall, alarms = figures["recall"], figures["false alarms"]
    lines += [
        "",
        f'At the end: "failing" on {int((end >= 2)[failed].sum())} of {int(failed.sum())} failed runs (recall '
        f'{interval(recall)}); "at risk" or worse on {int((end >= 1)[learned].sum())} of {int(learned.sum())} runs '
        f'that learned (false alarms {interval(alarms)}), "failing" on {int((end >= 2)[learned].sum())} of them; '
        f'"cannot tell" on {int((unknown > 0)[learned].sum())} of the runs that learned and '
        f"{int((unknown > 0)[failed].sum())} of those that failed.",
        *_without_eval_set(records, t),
        "",
        "| runs | n | failed | learned | AUC at 10%: verdict | AUC at 20%: verdict | dev score | training loss "
        "| loss trend | end: recall of failing | false alarms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, keep in SLICES:
        rows = np.array([keep(r) for r in records], dtype=bool)
        if not rows.any():
            continue
        part = {k: v[rows] for k, v in t.items()}
        f = _figures(part, opts.boot)
        cells = [interval(f["AUC verdict@0.1"]), *(interval(f[f"AUC {s}@0.2"]) for s in SCORES[:4])]
        cells += [interval(f["recall"]), interval(f["false alarms"])]
        lines.append(f"| {name} | {int(rows.sum())} | {int(part['failed'].sum())} | {int(part['learned'].sum())} | "
                     f"{' | '.join(cells)} |")  # fmt: skip
    return lines


def health_cost(opts: argparse.Namespace, rounds: int = 7) -> list[str]:
    """The gradient pass over 32 dev examples of the first task (MiniLM, ``--max-length`` tokens, 16 a batch)
    without the run-health signals, with the outputs' (predictions, losses), and with the layers' gradient norms
    too, interleaved ``rounds`` times; the fastest round of each and their ratios."""
    import torch
    import transformers as T

    from bertwatch.data.glue import load_glue
    from bertwatch.heads.gradients.health import HealthAccumulator
    from bertwatch.heads.gradients.importance import gradient_stats
    from bertwatch.heads.roles import token_roles

    torch.set_num_threads(opts.threads)
    path = minilm_path()
    tok = T.AutoTokenizer.from_pretrained(path)
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2).eval()
    rows = load_glue("sst2", "dev", opts.glue_dir, limit=PROBE)
    batches = []
    for start in range(0, PROBE, BATCH):
        part = rows[start : start + BATCH]
        pairs = [r.get("text_pair") for r in part]
        enc = tok([r["text"] for r in part], pairs if pairs[0] is not None else None, truncation=True,
                  max_length=opts.max_length, padding=True, return_tensors="pt")  # fmt: skip
        batch = {**enc, "labels": torch.tensor([int(r["label"]) for r in part])}
        batches.append((batch, token_roles(batch["input_ids"], batch["attention_mask"], tok)))
    times: dict[str, list[float]] = {"without": [], "outputs": [], "gradients": []}
    for _ in range(rounds):
        for mode in times:
            start = time.perf_counter()
            health = None if mode == "without" else HealthAccumulator.for_model(model, 6, mode == "gradients")
            for batch, roles in batches:
                gradient_stats(model, batch, roles, health=health)
            times[mode].append(time.perf_counter() - start)
    best = {mode: min(t) for mode, t in times.items()}
    return [f"{mode}: fastest {t:.2f} s, {t / best['without']:.2f} x without" for mode, t in best.items()]


def _append(out: Path, record: dict) -> None:
    """One JSON line appended in one write (parallel jobs share the file)."""
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def _in_parallel(todo: list[dict], opts: argparse.Namespace) -> None:
    """``todo`` over ``opts.jobs`` processes of this script, each given every ``jobs``-th run (one ``--runs`` index
    at a time, ``--no-report``), appending to the same ``--out``."""
    import shlex
    import subprocess

    same = ["--draw", opts.draw, "--out", opts.out, "--device", opts.device, "--threads", str(opts.threads),
            "--dev-size", str(opts.dev_size), "--logging-steps", str(opts.logging_steps), "--no-report"]  # fmt: skip
    if opts.glue_dir:
        same += ["--glue-dir", opts.glue_dir]
    commands = []
    for share in (todo[j :: opts.jobs] for j in range(opts.jobs)):
        runs = [shlex.join([sys.executable, __file__, *same, "--runs", str(c["index"])]) for c in share]
        if runs:
            commands.append("; ".join(runs))
    procs = [subprocess.Popen(["bash", "-c", command]) for command in commands]
    for proc in procs:
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue-dir", default=default_glue_dir())
    parser.add_argument("--draw", choices=tuple(DRAWS), default="wide", help="what the runs are drawn from")
    parser.add_argument(
        "--runs",
        default="0-99",
        help="the run indices to run, a range 0-99 (each run's task, "
        "rate, length, seed, evaluation and cadence are drawn from its index)",
    )
    parser.add_argument("--max-length", type=int, default=64, help="the sequence length of --cost")
    parser.add_argument(
        "--dev-size", type=int, default=400, help="dev examples: half seen (the eval set), half unseen (the outcome)"
    )
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--logging-steps", type=int, default=10, help="the Trainer logs every N steps")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the runs train")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time, each in its own process")
    parser.add_argument("--no-report", action="store_true", help="run only; print no figures")
    parser.add_argument("--out", default="failures.jsonl", help="one JSON line per finished run (resumable)")
    parser.add_argument("--report", action="store_true", help="only print the figures of the finished runs")
    parser.add_argument("--cost", action="store_true", help="only time the gradient pass with and without health")
    opts = parser.parse_args()
    if opts.cost:
        print("\n".join(health_cost(opts)))
        return
    out = Path(opts.out)
    done = {json.loads(line)["key"] for line in out.read_text().splitlines() if line.strip()} if out.exists() else set()
    if not opts.report:
        first, last = (int(x) for x in opts.runs.split("-")) if "-" in opts.runs else (int(opts.runs),) * 2
        todo = [c for c in configs(last - first + 1, first, opts.draw) if run_key(c, opts) not in done]
        if opts.jobs > 1:
            _in_parallel(todo, opts)
        for config in todo if opts.jobs == 1 else ():
            record = run_one(config, opts)
            _append(out, record)
            print(f"{record['key']}: {record['seconds']} s (bertwatch {record['bertwatch_seconds']} s)", flush=True)
    if opts.no_report:
        return
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    print("\n".join(report(records, opts)), flush=True)


if __name__ == "__main__":
    main()

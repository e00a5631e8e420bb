"""``AblationCallback`` (``bertwatch/callbacks/ablate_on_end.py``): the sweep at the end of a real Trainer run, and
the one reading of the Trainer's settings it makes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import transformers as T

from bertwatch.callbacks._context import TrainerContext
from bertwatch.callbacks.ablate_on_end import AblationCallback
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, training_args


def test_callback_runs_the_sweep_at_the_end_of_training(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_bert(tokenizer)
    callback = AblationCallback(n_resamples=50, prune=False, progress=False)
    args = training_args(str(tmp_path), max_steps=3, report_to=["tensorboard"])
    trainer = T.Trainer(
        model=model,
        args=args,
        train_dataset=toy_dataset(tokenizer, 16, 0),
        eval_dataset=toy_dataset(tokenizer, 12, 1),
        processing_class=tokenizer,
        data_collator=T.DataCollatorWithPadding(tokenizer),
        callbacks=[callback],
    )
    callback.set_trainer(trainer)
    trainer.train()
    result = callback.results["uniform"]
    assert result.num_examples == 12 and result.heads.shape == (2, 4, 5)
    assert (tmp_path / "bertwatch_ablation" / "ablation.json").is_file()
    # one report, where `bertwatch report OUT` writes it; the ablation folder's page points to it
    report = tmp_path / "report.html"
    assert callback.report(args) == report and "Mode <code>uniform</code>" in report.read_text(encoding="utf-8")
    pointer = (tmp_path / "bertwatch_ablation" / "report.html").read_text(encoding="utf-8")
    assert 'url=../report.html"' in pointer and "Mode" not in pointer
    from bertwatch.cli.report import cli_report

    written = report.read_text(encoding="utf-8")
    assert cli_report([str(tmp_path)]) == 0
    assert report.read_text(encoding="utf-8") == written  # the same page in the same place
    from bertwatch.report.events import read_run

    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1
    tb_results, _ = read_run(runs[0])
    assert [r.mode for r in tb_results] == ["uniform"]
    np.testing.assert_allclose(tb_results[0].layers, result.layers, rtol=1e-6, atol=1e-6)

    from werkzeug.test import Client

    from tests.support.tb_helpers import make_wsgi_app

    app, _, _ = make_wsgi_app(tmp_path / "runs")
    response = Client(app).get(f"/data/plugin/bertwatch/ablation?run={runs[0].name}")
    assert response.status_code == 200, response.get_data(as_text=True)
    view = json.loads(response.get_data())
    assert view["mode"] == "uniform" and view["step"] == 3 and view["numExamples"] == 12
    np.testing.assert_allclose(np.array(view["heads"], dtype=float), result.heads, rtol=1e-6, atol=1e-6)


def test_the_sweep_kwargs_are_the_one_reading_of_the_trainers_settings(tmp_path: Path) -> None:
    """Eval batch size, ``compute_metrics`` with ``metric_for_best_model`` / ``greater_is_better`` (only then: the
    metric is its key), the tokenizer (a processor's) and the step: read from the Trainer's arguments and state."""
    args = T.TrainingArguments(
        str(tmp_path),
        report_to="none",
        per_device_eval_batch_size=3,
        metric_for_best_model="f1",
        greater_is_better=False,
    )
    state = T.TrainerState(global_step=12)
    assert AblationCallback().sweep_kwargs(args, state, TrainerContext()) == {"batch_size": 3, "step": 12}
    tokenizer, metrics = object(), (lambda prediction: {"f1": 1.0})
    processor = SimpleNamespace(tokenizer=tokenizer)  # a multimodal processor: its tokenizer is the one used
    got = AblationCallback(compute_metrics=metrics).sweep_kwargs(
        args, state, TrainerContext(event={"processing_class": processor})
    )
    assert got == {
        "batch_size": 3,
        "compute_metrics": metrics,
        "metric": "f1",
        "greater_is_better": False,
        "tokenizer": tokenizer,
        "step": 12,
    }
    bare = T.TrainingArguments(str(tmp_path), report_to="none")
    want = {"batch_size": bare.per_device_eval_batch_size, "compute_metrics": metrics, "step": 12}
    assert AblationCallback(compute_metrics=metrics).sweep_kwargs(bare, state, TrainerContext()) == want

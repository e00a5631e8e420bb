"""``AblationCallback`` (``bertwatch/callbacks/ablate_on_end.py``): the sweep at the end of a real Trainer run, and
the one reading of the Trainer's settings it makes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import transformers as T

from bertwatch.callbacks.ablate_on_end import AblationCallback, _trainer_ablation_kwargs
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
    assert (tmp_path / "bertwatch_ablation" / "report.html").is_file()
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


def test_trainer_ablation_kwargs_is_the_one_reading_of_the_trainers_settings() -> None:
    args = SimpleNamespace(per_device_eval_batch_size=8, metric_for_best_model="f1", greater_is_better=False)
    assert _trainer_ablation_kwargs(args) == {"batch_size": 8}  # no compute_metrics: the metric is not its key
    tokenizer, metrics = object(), (lambda prediction: {"f1": 1.0})
    processor = SimpleNamespace(tokenizer=tokenizer)
    got = _trainer_ablation_kwargs(args, compute_metrics=metrics, processing_class=processor, step=12)
    assert got == {
        "batch_size": 8,
        "compute_metrics": metrics,
        "metric": "f1",
        "greater_is_better": False,
        "tokenizer": tokenizer,
        "step": 12,
    }
    bare = SimpleNamespace(per_device_eval_batch_size=None, metric_for_best_model=None, greater_is_better=None)
    assert _trainer_ablation_kwargs(bare, compute_metrics=metrics) == {"batch_size": 32, "compute_metrics": metrics}

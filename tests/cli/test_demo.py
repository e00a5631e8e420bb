"""``bertwatch demo`` measures whether its fine-tuned model ships: after training and ablation it runs
``bertwatch ship`` (fp32, INT8, the mixed variant, pruned from the ablation's order, pruned + INT8) on the dev
examples, says where ``ship.json`` went, and its report shows the "Will it ship?" section. Training is replaced by a
tiny checkpoint and an ablation order, so the pipeline runs in seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertwatch.cli import demo
from tests.support.ship_models import lively_classifier, save_checkpoint
from tests.support.tiny_trainer import toy_texts


def _fake_training(out: Path, runs: Path, train: list, dev: list, settings) -> dict[str, float]:
    """What the demo's training leaves: the model folder with its ablation output (a real sweep, tiny model)."""
    from bertwatch.ablation.sweep import ablate

    save_checkpoint(out / "model")
    model, tokenizer = lively_classifier()
    ablate(model, dev, tokenizer, mode="uniform", out_dir=out / "model" / "bertwatch_ablation", n_resamples=50)
    return {"eval_accuracy": 0.5}


def _no_tensorboard(logdir: Path, port: int):
    raise RuntimeError("not in this test")


def test_the_demo_ships_its_model_and_reports_the_table(tmp_path: Path, monkeypatch, capsys) -> None:
    dev = toy_texts(40, seed=6)
    monkeypatch.setattr(demo, "_sst2", lambda folder, train_examples, eval_examples, seed: (toy_texts(8), dev))
    monkeypatch.setattr(demo, "_fine_tune", _fake_training)
    monkeypatch.setattr(demo, "start_tensorboard", _no_tensorboard)
    original, calls = demo.ship_demo, []

    def shipped(out, dev, max_length):
        calls.append(max_length)
        return original(out, dev, max_length, repeats=2)

    monkeypatch.setattr(demo, "ship_demo", shipped)
    paths = demo.run_demo(tmp_path / "demo", glue_dir="unused", serve=False, max_length=32)
    printed = capsys.readouterr().out
    ship_json = tmp_path / "demo" / "ship" / "ship.json"
    assert calls == [32] and paths["ship"] == str(ship_json)
    assert f"[bertwatch demo] ship table: {ship_json} (the ONNX files beside it)" in printed
    result = json.loads(ship_json.read_text())
    names = [v["name"] for v in result["variants"]]
    assert names[:2] == ["fp32", "int8"] and names[-2:] == ["pruned", "pruned+int8"]
    assert sum(map(len, result["removed_heads"].values())) == 2 and result["num_examples"] == 40  # 25% of 8 heads
    page = Path(paths["report"]).read_text(encoding="utf-8")
    assert "Will it ship?" in page and "model.pruned.int8.onnx" in page


class _Built(Exception):
    """Raised where the demo's model is built, to stop the demo there."""


def test_the_demos_model_names_its_classes_as_sst2s(tmp_path: Path, monkeypatch) -> None:
    import transformers

    built: list[dict] = []

    def from_pretrained(path, **kwargs):
        built.append(kwargs)
        raise _Built

    monkeypatch.setattr(transformers.AutoModelForSequenceClassification, "from_pretrained", from_pretrained)
    monkeypatch.setattr(demo, "_sst2", lambda folder, train_examples, eval_examples, seed: (toy_texts(8), toy_texts(8)))
    monkeypatch.setattr(demo, "start_tensorboard", _no_tensorboard)
    with pytest.raises(_Built):
        demo.run_demo(tmp_path / "demo", glue_dir="unused", serve=False)
    (kwargs,) = built  # named in the config, so the ablation card, ship and the plugin say "positive", not "class 1"
    assert kwargs["num_labels"] == 2 and kwargs["id2label"] == {0: "negative", 1: "positive"}
    assert kwargs["label2id"] == {"negative": 0, "positive": 1}


@pytest.fixture(autouse=True)
def _offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_the_demos_ablation_fits_a_cpu() -> None:
    """The demo's ablation after training is the sweep's CPU default (the first 128 dev examples) with a budget of
    2 minutes for its optional parts, which it leaves to the budget; the demo passes these to ``watch``."""
    import inspect

    from bertwatch.ablation.estimate import example_cap
    from bertwatch.ablation.settings import AblationSettings

    settings = AblationSettings.resolve(None, **demo.DEMO_ABLATION)
    assert settings.budget_minutes is not None and settings.budget_minutes <= 2
    assert (settings.keep_only, settings.prune_iterative, settings.prune_random) == (None, None, None)
    assert example_cap(settings.max_examples, "cpu") <= 128
    assert "ablation=AblationOptions(mode=settings.ablation_mode, kwargs=DEMO_ABLATION)" in inspect.getsource(demo)

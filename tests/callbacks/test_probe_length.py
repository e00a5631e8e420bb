"""No silent cut: a probe text longer than the length bertwatch measures warns once at setup (how many, to what
length), the length is recorded in the run's event file, served by the plugin and shown in the report; a
tokenized probe set is never cut, and one the model cannot take is refused at setup."""

from __future__ import annotations

import glob
import json
import os
import urllib.parse
import warnings

import pytest
import transformers as T
from werkzeug.test import Client

from bertwatch.callbacks import BertWatchWarning, EntropyCallback, ProbeOptions, SetupError, watch
from bertwatch.probe.probe_set import build_probe_set
from bertwatch.report.events import read_run
from bertwatch.report.html import build_html
from bertwatch.tb.writer import metadata as md
from tests.support.strict import strict
from tests.support.tb_helpers import make_wsgi_app
from tests.support.tiny_trainer import WORDS, tiny_bert, tiny_tokenizer, toy_dataset, training_args

LENGTH = 16
#: Two texts of 30 words (32 tokens with [CLS] and [SEP]) and three of at most 14 tokens.
LONG = [" ".join(WORDS[i % len(WORDS)] for i in range(k, k + 30)) for k in (0, 7)]
SHORT = ["good movie .", "the plot was dull , sadly .", "fun film and great music"]
TEXTS = [{"text": t, "label": i % 2} for i, t in enumerate(SHORT[:2] + LONG[:1] + SHORT[2:] + LONG[1:])]


class _StepSpy(T.TrainerCallback):
    """How many bertwatch warnings had been given when the first training step began."""

    def __init__(self, caught: list) -> None:
        self.caught, self.at_first_step = caught, None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.at_first_step is None:
            self.at_first_step = sum(issubclass(w.category, BertWatchWarning) for w in self.caught)


def _train(out, cb: EntropyCallback):
    tok = tiny_tokenizer()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spy = _StepSpy(caught)
        trainer = T.Trainer(
            model=tiny_bert(tok),
            args=training_args(str(out), max_steps=3, report_to="none"),
            train_dataset=toy_dataset(tok, 12, 0),
            processing_class=tok,
            data_collator=T.DataCollatorWithPadding(tok),
            callbacks=[cb, spy],
        )
        watch(trainer)
        trainer.train()
    ours = [w for w in caught if issubclass(w.category, BertWatchWarning)]
    (run,) = glob.glob(str(out / "runs" / "*"))
    return ours, spy.at_first_step, run


@pytest.fixture(scope="module")
def cut_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cut")
    cb = strict(EntropyCallback, every_n_steps=1, probe_texts=TEXTS, probing=ProbeOptions(max_length=LENGTH))
    ours, at_first_step, run = _train(out, cb)
    return ours, at_first_step, run


@pytest.mark.fast
def test_texts_are_counted_and_cut_only_when_longer(tmp_path) -> None:
    tok = tiny_tokenizer()
    lengths = [len(tok(t["text"])["input_ids"]) for t in TEXTS]
    assert sorted(lengths)[-2:] == [32, 32] and sorted(lengths)[2] < LENGTH
    probe = build_probe_set(tok, texts=TEXTS, max_length=LENGTH, batch_size=2)
    assert probe.truncated == 2 and probe.max_length == LENGTH
    assert [len(t) for t in probe.tokens] == [min(n, LENGTH) for n in lengths]
    assert probe.length_info() == {"max_length": LENGTH, "truncated": 2, "examples": 5, "longest": LENGTH}
    whole = build_probe_set(tok, texts=TEXTS, model=tiny_bert(tok), max_length=None)
    assert whole.truncated == 0 and whole.max_length == 64  # the tiny model's max_position_embeddings
    assert [len(t) for t in whole.tokens] == lengths
    capped = build_probe_set(tok, texts=TEXTS, model=tiny_bert(tok), max_length=1000)
    assert capped.max_length == 64 and capped.truncated == 0


@pytest.mark.fast
def test_a_tokenized_probe_set_is_never_cut_and_one_too_long_for_the_model_is_refused() -> None:
    tok = tiny_tokenizer()
    model = tiny_bert(tok)
    rows = [dict(tok(t["text"]), labels=t["label"]) for t in TEXTS]
    probe = build_probe_set(tok, dataset=rows, model=model, max_length=LENGTH)
    assert probe.truncated == 0 and probe.max_length is None
    assert probe.length_info()["longest"] == 32 and max(len(t) for t in probe.tokens) == 32
    too_long = [dict(tok(" ".join(["good"] * 80))), *rows]
    with pytest.raises(SetupError, match="82 tokens; the model takes at most 64"):
        build_probe_set(tok, dataset=too_long, model=model)


def test_a_long_probe_text_warns_once_at_setup_with_count_and_length(cut_run) -> None:
    ours, at_first_step, _ = cut_run
    cuts = [str(w.message) for w in ours if "probe examples are longer" in str(w.message)]
    assert len(cuts) == 1, [str(w.message) for w in ours]
    assert f"2 of 5 probe examples are longer than {LENGTH} tokens" in cuts[0]
    assert "probing=ProbeOptions(max_length=None)" in cuts[0]
    assert at_first_step >= 1, "the warning must come at setup, before the first training step"


def test_measuring_up_to_the_models_maximum_cuts_nothing_and_does_not_warn(tmp_path) -> None:
    cb = strict(EntropyCallback, every_n_steps=0, probe_texts=TEXTS, probing=ProbeOptions(max_length=None))
    ours, _, run = _train(tmp_path, cb)
    assert not [w for w in ours if "longer than" in str(w.message)]
    assert cb.watched is None or cb.watched.context is None or cb.watched.context.probe.truncated == 0
    (_, content) = _grid_content(run)
    model = "BertForSequenceClassification"  # a model made in memory has no folder: its class names it
    assert content["probe"] == {"max_length": 64, "truncated": 0, "examples": 5, "longest": 32, "model": model}


def _grid_content(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(run, size_guidance={"tensors": 0})
    acc.Reload()
    meta = acc.SummaryMetadata("bertwatch/heads/entropy")
    return acc, json.loads(meta.plugin_data.content)


def test_the_length_is_in_the_event_file_the_plugin_route_and_the_report(cut_run) -> None:
    _, _, run = cut_run
    model = "BertForSequenceClassification"
    expected = {"max_length": LENGTH, "truncated": 2, "examples": 5, "longest": LENGTH, "model": model}
    _, content = _grid_content(run)
    assert content["probe"] == expected and content["version"] == md.FORMAT_VERSION

    app, _, _ = make_wsgi_app(os.path.dirname(run))
    client = Client(app)
    name = os.path.basename(run)
    query = urllib.parse.urlencode({"run": name, "tag": "bertwatch/heads/entropy"})
    grid = json.loads(client.get(f"/data/plugin/bertwatch/grid?{query}").get_data())
    assert grid["probe"] == expected
    tags = json.loads(client.get("/data/plugin/bertwatch/tags").get_data())
    assert tags["runs"][name]["bertwatch/heads/entropy"]["probe"] == expected

    _, training = read_run(run)
    assert training["probe"] == expected
    page = build_html([], training)
    assert f"2 of them were longer and were cut to their first {LENGTH} tokens" in page
    assert 'id="probe-length"' in page
    assert f"{model}</span> · 2 layers × 4 heads" in page  # the glance names the model the run watched


@pytest.mark.fast
def test_logs_without_the_probe_length_still_load_and_say_so(tmp_path) -> None:
    import numpy as np

    from bertwatch.tb.writer.summary import SummaryWriter

    with SummaryWriter(str(tmp_path / "old")) as writer:
        writer.add_head_grids({"entropy": np.ones((2, 3))}, step=0)
    _, training = read_run(tmp_path)
    assert training["probe"] is None and "entropy" in training["grids"]
    assert "does not record the probe length" in build_html([], training)
    assert md.probe_info({"max_length": "128", "truncated": 0}) is None
    assert md.probe_info({"max_length": None, "truncated": 0, "examples": 3, "longest": 9})["max_length"] is None

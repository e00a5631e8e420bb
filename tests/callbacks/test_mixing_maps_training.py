"""The kept examples' maps of every context-mixing measure during training: a Trainer run that watches a mixing
statistic writes, beside the attention weights and at the same steps, each example's norms, ALTI, composed ALTI and
rollout maps, equal to ``mixing_maps`` of that example alone (no batch, no padding), and the plugin lists them; a run
without mixing statistics writes only the weights, as before."""

from __future__ import annotations

import copy
import json
import urllib.parse

import numpy as np
import torch
import transformers as T
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util
from werkzeug.test import Client

from bertwatch.callbacks import BertWatchCallback, watch
from bertwatch.core.stat_names import MIXING_MEASURES
from bertwatch.heads.mixing.mixing_model import mixing_maps
from bertwatch.probe.probe_pass import LIVE_MEASURES, written_measures
from tests.support.models import tiny_model
from tests.support.strict import strict
from tests.support.tb_helpers import make_wsgi_app
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, training_args
from tests.support.tolerance import assert_float32_close

#: The maps are stored as float16: one rounding of a value in [0, 1] to half precision.
EPS16 = float(np.finfo(np.float16).eps)
NUM_MAPS = 2


def _train(out, stats):
    """A tiny BERT trained for 2 steps, probed on sentence pairs (segment ids matter); returns the model as it was at
    step 0, the trained model and the run directory."""
    tok = tiny_tokenizer()
    model = tiny_bert(tok)
    initial = copy.deepcopy(model).eval()
    trainer = T.Trainer(
        model=model,
        args=training_args(str(out), max_steps=2, report_to="tensorboard"),
        train_dataset=toy_dataset(tok, 16, 0),
        eval_dataset=toy_dataset(tok, 8, 1, pairs=True),
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=[strict(BertWatchCallback, stats, every_n_steps=1, num_probe_examples=6, num_maps=NUM_MAPS)],
    )
    watch(trainer)
    trainer.train()
    (run_dir,) = (out / "runs").iterdir()  # bertwatch writes into the Trainer's own TensorBoard run
    return tok, initial, model.eval(), run_dir


def _maps(acc, tag):
    """``{step: (header, maps [L, H, n, n] float32)}`` of one attention tag."""
    out = {}
    for event in acc.Tensors(tag):
        header, blob = tensor_util.make_ndarray(event.tensor_proto)
        info = json.loads(header)
        shape = (info["layers"], info["heads"], info["length"], info["length"])
        out[event.step] = info, np.frombuffer(blob, dtype="<f2").reshape(shape).astype(np.float32)
    return out


def _events(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    acc.Reload()
    return acc


def test_a_run_watching_mixing_writes_each_measures_maps_of_each_kept_example_alone(tmp_path):
    tok, initial, trained, run_dir = _train(tmp_path, ["entropy", "cls_mass_alti_layer"])
    acc = _events(run_dir)
    models = {0: initial, 2: trained}
    for index in range(NUM_MAPS):
        weights = _maps(acc, f"bertwatch/attention/{index:02d}")
        assert sorted(weights) == sorted(models)
        for step, model in models.items():
            info, _ = weights[step]
            ids = torch.tensor([tok.convert_tokens_to_ids(info["tokens"])])
            alone = {"input_ids": ids, "token_type_ids": torch.tensor([info["segments"]])}
            assert len(set(info["segments"])) == 2  # a pair: the segment ids reach the model
            want = mixing_maps(model, alone, torch.ones_like(ids, dtype=torch.bool))
            for measure in LIVE_MEASURES:
                written = _maps(acc, f"bertwatch/attention/{index:02d}/{measure}")
                assert sorted(written) == sorted(models), measure
                header, got = written[step]
                assert header["tokens"] == info["tokens"] and header["segments"] == info["segments"]
                expected = want[measure][0].numpy()
                expected = expected if measure == "norms" else expected[:, None]
                assert got.shape == expected.shape, measure
                assert_float32_close(got, expected, roundings=1, eps=EPS16, msg=f"{measure} step {step}")
    assert not any(t.endswith("/value_zeroing") for t in acc.Tags()["tensors"])

    client = Client(make_wsgi_app(run_dir.parent)[0])
    query = urllib.parse.urlencode({"run": run_dir.name, "index": 1})
    response = client.get(f"/data/plugin/bertwatch/attention_measures?{query}")
    assert response.status_code == 200, response.get_data(as_text=True)
    listed = [(m["measure"], m["steps"]) for m in json.loads(response.get_data())["measures"]]
    assert listed == [(m, [0, 2]) for m in ("weights", *LIVE_MEASURES)]


def test_a_run_without_mixing_statistics_writes_the_weights_alone(tmp_path):
    _, _, _, run_dir = _train(tmp_path, ["entropy", "cls_mass"])
    tags = [t for t in _events(run_dir).Tags()["tensors"] if t.startswith("bertwatch/attention/")]
    assert sorted(tags) == [f"bertwatch/attention/{i:02d}" for i in range(NUM_MAPS)]


def test_the_live_measures_are_the_mixing_measures_but_weights_and_value_zeroing():
    assert LIVE_MEASURES == tuple(m for m in MIXING_MEASURES if m not in ("weights", "value_zeroing"))
    assert written_measures(tiny_model("bert")) == LIVE_MEASURES
    assert written_measures(tiny_model("modernbert")) == ("rollout",)  # pre-LN: rollout needs the weights only

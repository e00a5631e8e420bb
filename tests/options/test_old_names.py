"""The option names of earlier versions (``options.old_names``): each still works, folded into its new place with one
``FutureWarning`` that gives the new spelling and points at the user's line, through every way in (``WatchSettings``,
``replace``, the callbacks, ``watch()``, ``watching_trainers()``); retired options are dropped with their reason."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import transformers as T

from bertwatch.callbacks import BertWatchCallback, EntropyCallback, watch, watching_trainers
from bertwatch.options.old_names import OLD_NAMES, RENAMED, fold_old_names
from bertwatch.options.settings import GROUPS, AlertSettings, ExpertOptions, ProbeOptions, WatchSettings
from tests.support.strict import strict
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer


def _new_place(settings: WatchSettings, old: str):
    group, field = OLD_NAMES[old].split(".")
    return getattr(getattr(settings, group), field)


OLD_SAMPLES = {  # an old flat name -> a value other than its default
    "probe_seed": 3, "probe_batch_size": 4, "probe_max_length": 64, "tokenizer": tiny_tokenizer,
    "data_collator": print, "reference_model": "some/model", "cache_reference": False, "compat_length": 200,
    "at_start": False, "on_evaluate": False, "at_end": False, "alert_logit_multiple": 4.0, "alert_logit_bound": 50.0,
    "alert_entropy_fraction": 0.3, "alert_entropy_min_drop": 0.5, "alert_sink_fraction": 0.2,
    "alert_sink_min_change": 0.3, "alert_patience": 3, "ablation_mode": "zero", "ablation_kwargs": {"n_resamples": 9},
    "integrated_gradients": True, "ig_steps": 5, "normalize_importance": True, "word_classes": True,
    "head_clusters": True, "cluster_examples": 3, "maps_every_n_steps": 7,
    "log_to_trackers": False,
}  # fmt: skip


@pytest.mark.fast
def test_every_old_flat_name_still_works_and_warns_with_the_new_spelling(tmp_path: Path) -> None:
    assert set(OLD_SAMPLES) == {old for old, new in OLD_NAMES.items() if new is not None}
    watched = _watching(tmp_path)
    for old, value in OLD_SAMPLES.items():
        group, field = OLD_NAMES[old].split(".")
        cls = next(c for g, c, _ in GROUPS if g == group)
        for build in (WatchSettings, WatchSettings().replace, BertWatchCallback, watched):
            with pytest.warns(FutureWarning, match=rf"^{old}= is deprecated: use {group}={cls.__name__}\({field}="):
                made = build(**{old: value})
            settings = made if isinstance(made, WatchSettings) else made.settings
            assert _new_place(settings, old) == value, (old, build)
            with pytest.warns(FutureWarning, match=rf"settings.{old} is deprecated: use settings.{group}.{field}"):
                assert getattr(settings, old) == value
    with pytest.warns(FutureWarning, match=r"^probe_seed= is deprecated: use probing=ProbeOptions\(seed=1\)$"):
        assert EntropyCallback(probe_seed=1).probe_settings.seed == 1


@pytest.mark.fast
def test_old_names_merge_into_the_nested_value_given_and_point_at_the_callers_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cb = BertWatchCallback(probing=ProbeOptions(batch_size=4), probe_seed=2, alert_patience=3)
        s = WatchSettings(expert=ExpertOptions(head_clusters=True), ig_steps=4)
        given = WatchSettings(alerts=AlertSettings(patience=5))
        replaced = given.replace(alert_entropy_fraction=0.3)
    assert [Path(w.filename).name for w in caught] == [Path(__file__).name] * 4, [w.filename for w in caught]
    assert all(w.category is FutureWarning for w in caught)
    assert cb.settings.probing == ProbeOptions(batch_size=4, seed=2) and cb.settings.alerts.patience == 3
    assert s.expert == ExpertOptions(head_clusters=True, ig_steps=4)
    assert replaced.alerts == AlertSettings(patience=5, entropy_fraction=0.3)
    with pytest.warns(FutureWarning, match="probe_max_length"):
        with pytest.raises(ValueError, match=r"probe_max_length=1 \(now probing=ProbeOptions\(max_length=1\)\)"):
            WatchSettings(probe_max_length=1)


@pytest.mark.fast
def test_old_names_given_to_watch_warn_once_each_at_the_users_line(tmp_path: Path) -> None:
    """``watch()`` and ``watching_trainers()`` pass the options on through bertwatch's own calls; the warning still
    names the user's line, once per old name, however many Trainers the block builds."""

    def trainer() -> T.Trainer:
        return T.Trainer(model=tiny_bert(tiny_tokenizer()), args=T.TrainingArguments(str(tmp_path), report_to="none"))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callback = watch(trainer(), probe_seed=2)
        with watching_trainers(alert_patience=3) as attached:
            trainer(), trainer()
    ours = [w for w in caught if "is deprecated: use" in str(w.message)]
    assert [str(w.message).split("=")[0] for w in ours] == ["probe_seed", "alert_patience"]
    assert [Path(w.filename).name for w in ours] == [Path(__file__).name] * 2, [w.filename for w in ours]
    assert callback.settings.probing.seed == 2
    assert len(attached) == 2 and all(cb.settings.alerts.patience == 3 for cb in attached)


@pytest.mark.fast
def test_strict_is_no_option_any_more() -> None:
    with pytest.warns(FutureWarning, match="strict= is deprecated and ignored"):
        cb = BertWatchCallback(strict=True)
    assert cb.strict is False
    with pytest.warns(FutureWarning, match="offload_stats= is deprecated and ignored: the statistics run on the"):
        BertWatchCallback(offload_stats=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BERTWATCH_STRICT", "1")  # the environment switch of earlier versions: read no more
        assert not EntropyCallback().strict
    made = strict(EntropyCallback)  # the tests' switch, around building the callback
    assert made.strict and not EntropyCallback().strict
    with_sweep = strict(BertWatchCallback, ablate_on_end=True)
    assert with_sweep.strict and with_sweep.ablation.strict


@pytest.mark.fast
def test_the_one_fold_gives_both_spellings_and_leaves_new_names_alone() -> None:
    assert fold_old_names({"num_maps": 2}, stacklevel=1) == {"num_maps": 2}
    with pytest.warns(FutureWarning, match=r"^ig_steps= is deprecated: use expert=ExpertOptions\(ig_steps=5\)$"):
        folded = fold_old_names({"ig_steps": 5, "expert": ExpertOptions(head_clusters=True)}, stacklevel=1)
    assert folded == {"expert": ExpertOptions(head_clusters=True, ig_steps=5)}
    assert set(RENAMED) == {old for old, new in OLD_NAMES.items() if new is not None}
    assert RENAMED["probe_seed"] == "probing=ProbeOptions(seed=...)"


def _watching(tmp_path: Path):
    """``watch(trainer, **options)`` on one real Trainer, whose bertwatch callback is removed again after each call."""
    trainer = T.Trainer(model=tiny_bert(tiny_tokenizer()), args=T.TrainingArguments(str(tmp_path), report_to="none"))

    def watched(**options):
        callback = watch(trainer, **options)
        trainer.remove_callback(callback)
        return callback

    return watched

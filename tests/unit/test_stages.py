"""trainer.stages without training: how evaluate scores, keeps and reports a model (a classifier whose
probabilities are given), and how the classifier stage takes up a run interrupted after or at its end."""

from __future__ import annotations

import csv
import io
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trainer.classification import blend
from trainer.stages import classifier as clf_stage
from trainer.stages import evaluate as E

LABELS = ["food", "sport", "tech"]
WORDS = {"food": "bread cheese soup", "sport": "ball goal team", "tech": "chip code cloud"}


def prepared(*, multi: bool = False, test: bool = True, n: int = 60, signal: bool = True, seed: int = 0):
    """A prepared run's data: texts that name their label (TF-IDF learns them) unless `signal` is off."""
    rng = np.random.default_rng(seed)
    labels, texts = [], []
    for i in range(n):
        tags = [LABELS[i % 3]]
        if multi:  # any of the labels, at least one
            tags = sorted({LABELS[j] for j in range(3) if rng.random() < 0.4}) or tags
        words = [w for t in tags if signal for w in rng.choice(WORDS[t].split(), 2)] + ["the", "a", str(i % 7)]
        texts.append(" ".join(words))
        labels.append(tags)
    cut = (30, 45) if test else (40, n)
    data = SimpleNamespace(
        label_names=LABELS, multi_label=multi, has_unlabelled=False, labels=labels, texts=texts, row_ids=list(range(n))
    )
    return SimpleNamespace(
        data=data,
        train_idx=list(range(cut[0])),
        valid_idx=list(range(cut[0], cut[1])),
        test_idx=list(range(cut[1], n)) if test else [],
        tokenizer=SimpleNamespace(id="tok"),
        splits=SimpleNamespace(source="seeded", duplicates_dropped=0),
        domain_info=None,
    )


class GivenLearner:
    """Stands in for a trained classifier's learner: the probabilities of each row are given."""

    def __init__(self, probs: np.ndarray):
        self.probs = probs

    def get_preds(self, dl):
        return torch.tensor(self.probs[dl], dtype=torch.float32), None


def classifier(prep, probs, *, probe=None):
    return SimpleNamespace(
        learn=GivenLearner(probs),
        dls=SimpleNamespace(valid=prep.valid_idx),
        tokens=None,
        probe=probe,
        best_epoch={"epoch": 2, "of": 2, "valid_loss": 0.4},
    )


def truth(prep) -> np.ndarray:
    return np.array([[float(l in row) for l in LABELS] for row in prep.data.labels])


def confident(prep, right: float = 0.9) -> np.ndarray:
    """Probabilities that put `right` on each row's true labels."""
    t = truth(prep)
    return np.where(t > 0, right, (1 - right) / 2)


def run_context(monkeypatch, *, blend_tfidf: bool = True, thresholds: str = "per_label"):
    lines: list[str] = []
    # the test rows' loader: the rows themselves, as GivenLearner reads them
    monkeypatch.setattr(
        E, "classifier_dataloaders", lambda tokens, labels, splits, **kw: SimpleNamespace(valid=splits[1])
    )
    a = SimpleNamespace(
        thresholds=thresholds, lang_code="en", lang="en", seed=0, blend_tfidf=blend_tfidf, bs=8, seq_len=16
    )
    return SimpleNamespace(
        a=a, log=SimpleNamespace(line=lines.append), stage=lambda *a: lines.append("== evaluating"), bucket=None
    ), lines


# --- Scoring: every model scored alike ------------------------------------------------------------------------


def test_the_figures_come_from_the_test_rows_when_there_are_and_thresholds_from_validation():
    prep = prepared(test=True)
    s = E.Scoring.of(prep, "per_label")
    assert (s.scored, s.split) == (prep.test_idx, "test")
    assert s.rows == {"fit": "train", "thresholds": None, "scores": "test"}  # single-label: argmax, no thresholds
    assert s.thresholds(confident(prep)[prep.valid_idx]) is None
    assert (s.valid_targets == truth(prep)[prep.valid_idx]).all()

    valid_only = E.Scoring.of(prepared(test=False, multi=True), "per_label")
    assert (valid_only.split, valid_only.scored) == ("valid", valid_only.valid_idx)
    assert valid_only.rows["thresholds"] == "valid"
    assert valid_only.thresholds(np.full((len(valid_only.valid_idx), 3), 0.5)).shape == (3,)


def test_a_score_is_against_the_scored_rows_unless_told_which():
    prep = prepared(test=True)
    s = E.Scoring.of(prep, "per_label")
    right = confident(prep)
    assert s.score(right[s.scored], None)["accuracy"] == 1.0
    wrong_on_valid = np.roll(right, 1, axis=1)
    assert s.score(wrong_on_valid[prep.valid_idx], None, s.valid_targets)["accuracy"] == 0.0


# --- which model is kept, and what is reported beside it -------------------------------------------------------


def blended_with(kept: str, s: E.Scoring, weight: float = 0.6) -> E.Blended:
    n_valid, n_scored = len(s.valid_idx), len(s.scored)
    choice = blend.Choice(kept, weight, None, {"blend_weight": weight, "classifier": 0.5, "blend": 0.4})
    tfidf = E.Probs(np.full((n_valid, 3), 1 / 3), np.full((n_scored, 3), 1 / 3))
    return E.Blended(
        tfidf_model=None,
        tfidf={},
        tfidf_probs=tfidf,
        choice=choice,
        probs=E.Probs(np.full((n_valid, 3), 0.2), np.full((n_scored, 3), 0.3)),
        thresholds=None,
        figures={"macro_f1": 0.7, "weight": weight, "rows": s.rows},
    )


@pytest.mark.parametrize("allowed", [True, False])
def test_the_blend_is_kept_only_when_chosen_and_allowed(allowed):
    s = E.Scoring.of(prepared(), "per_label")
    fwd = E.Probs(np.full((len(s.valid_idx), 3), 0.9), np.full((len(s.scored), 3), 0.8))
    served = E.Probs(np.full((len(s.valid_idx), 3), 0.5), np.full((len(s.scored), 3), 0.4))
    kept = E.kept_model(allowed, fwd, None, {"macro_f1": 0.6}, served, blended_with(blend.BLEND, s))
    if not allowed:  # trainer.blend_tfidf off: the forward classifier, whatever the choice
        assert kept.name == blend.CLASSIFIER and kept.probs is fwd and kept.figures == {"macro_f1": 0.6}
        return
    assert kept.name == blend.BLEND and kept.figures == {"macro_f1": 0.7}  # the blend's, without weight and rows
    assert np.allclose(kept.probs.valid, 0.6 * 0.5 + 0.4 / 3)  # the served classifier mixed at the chosen weight
    assert np.allclose(kept.probs.scored, 0.3)


def test_a_classifier_choice_keeps_the_forward_classifier_even_when_a_blend_is_allowed():
    s = E.Scoring.of(prepared(), "per_label")
    fwd = E.Probs(np.zeros((len(s.valid_idx), 3)), np.zeros((len(s.scored), 3)))
    kept = E.kept_model(True, fwd, None, {"macro_f1": 0.6}, fwd, blended_with(blend.CLASSIFIER, s, weight=1.0))
    assert kept.name == blend.CLASSIFIER and kept.figures == {"macro_f1": 0.6}


def test_beside_test_figures_the_kept_models_validation_figures_beside_validation_ones_its_figures_at_0_5():
    for multi, test, expected in (
        (False, True, ["valid"]),
        (True, True, ["valid"]),
        (True, False, ["at_threshold_0_5"]),
        (False, False, []),
    ):
        prep = prepared(multi=multi, test=test)
        s = E.Scoring.of(prep, "per_label")
        right = confident(prep)
        kept = E.Kept(
            blend.CLASSIFIER, E.Probs(right[prep.valid_idx], right[s.scored]), np.full(3, 0.5) if multi else None, {}
        )
        beside = E.kept_beside(kept, s, bool(prep.test_idx))
        assert list(beside) == expected, (multi, test)
        for figures in beside.values():
            assert figures["macro_f1"] == 1.0


def test_the_probe_is_scored_on_the_same_rows_and_left_out_when_it_has_no_probabilities_there():
    prep = prepared(test=True)
    s = E.Scoring.of(prep, "per_label")
    right = confident(prep)
    probe = {
        "c": 1.0,
        "cv_loss": 0.3,
        "valid_loss": 0.35,
        "valid_probs": right[prep.valid_idx],
        "test_probs": np.roll(right[prep.test_idx], 1, axis=1),
    }
    figures = E.probe_figures(probe, s)
    assert figures["accuracy"] == 0.0  # the test rows' probabilities, not the validation ones
    assert figures["rows"]["scores"] == "test" and figures["c"] == 1.0
    assert E.probe_figures({**probe, "test_probs": None}, s) is None
    assert E.probe_figures(None, s) is None


def test_a_prediction_table_has_the_classifiers_own_columns_beside_a_blends_only():
    prep = prepared(test=False)
    data = prep.data
    probs = confident(prep)[:2]
    plain = E._predictions_csv(data, [0, 1], "valid", probs, probs > 0.5)
    mixed = E._predictions_csv(data, [0, 1], "valid", probs, probs > 0.5, clf_probs=probs)
    header, *rows = list(csv.reader(io.StringIO(plain.decode())))
    assert header == ["row_id", "split", "text", "true_labels", "pred_labels", "prob_food", "prob_sport", "prob_tech"]
    assert rows[0][4] == rows[0][3] == data.labels[0][0] and len(rows) == 2
    assert next(csv.reader(io.StringIO(mixed.decode())))[-3:] == [
        "model_prob_food",
        "model_prob_sport",
        "model_prob_tech",
    ]


def test_the_weights_check_is_said_as_it_went():
    said = E._checked({"chosen_weight": 0.6, "chosen_on_rows": 10, "checked_on_rows": 9, "confirmed": False})
    assert said == (
        "weight 0.6 chosen on 10 rows, checked on the other 9: it did not beat TF-IDF alone there: TF-IDF kept"
    )
    assert (
        E._checked({"chosen_weight": 0, "chosen_on_rows": 10, "checked_on_rows": 9, "confirmed": False})
        == "weight 0 (TF-IDF alone) chosen on 10 rows"
    )


# --- evaluate, whole, on given probabilities -------------------------------------------------------------------


def test_evaluate_reports_the_kept_model_and_writes_its_tables(monkeypatch):
    prep = prepared(test=True)
    rc, lines = run_context(monkeypatch)
    ev = E.evaluate(rc, prep, None, classifier(prep, confident(prep, right=0.5)), None)
    f = ev.figures
    assert f["kept"] in (blend.CLASSIFIER, blend.BLEND) and f["rows"]["scores"] == "test"
    reported = {k: f[k] for k in ("macro_f1", "micro_f1", "accuracy")}
    kept_figures = f["blend"] if f["kept"] == blend.BLEND else f["classifier"]
    assert reported == {k: kept_figures[k] for k in reported}
    assert (ev.tfidf_files is not None) == (f["kept"] == blend.BLEND)
    assert sorted(ev.predictions) == ["test_predictions.csv", "valid_predictions.csv"]
    assert f["valid"]["rows"] == {"thresholds": "valid", "scores": "valid"}
    assert (f["n_train"], f["n_valid"], f["n_test"]) == (30, 15, 15)
    assert len(ev.confusion[0]) == len(ev.confusion[1]) == 15
    assert lines[0] == "== evaluating" and lines[1].startswith("test: classifier macro-F1")
    assert lines[2].startswith("TF-IDF baseline on the same rows") and lines[3].startswith("blend ")


def test_evaluate_keeps_the_classifier_where_tfidf_has_nothing_to_learn(monkeypatch):
    prep = prepared(test=False, signal=False)
    rc, lines = run_context(monkeypatch)
    ev = E.evaluate(rc, prep, None, classifier(prep, confident(prep, right=0.98)), None)
    assert ev.figures["kept"] == blend.CLASSIFIER and ev.figures["accuracy"] == 1.0 and ev.tfidf_files is None
    assert list(ev.predictions) == ["valid_predictions.csv"]
    assert "model_prob_food" not in ev.predictions["valid_predictions.csv"].decode()


def test_evaluate_with_blending_off_keeps_the_classifier_and_says_so(monkeypatch):
    prep = prepared(test=True)
    rc, lines = run_context(monkeypatch, blend_tfidf=False)
    ev = E.evaluate(rc, prep, None, classifier(prep, confident(prep, right=0.5)), None)
    assert ev.figures["kept"] == blend.CLASSIFIER
    assert lines[-1].endswith(")") and "(trainer.blend_tfidf is off)" in lines[-1]


def test_a_bidirectional_run_reports_the_ensemble_as_the_classifier(monkeypatch):
    prep = prepared(test=True)
    rc, lines = run_context(monkeypatch, blend_tfidf=False)
    fwd, bwd = confident(prep, right=0.9), np.roll(confident(prep, right=0.9), 1, axis=1)  # the backward one: wrong
    ev = E.evaluate(rc, prep, None, classifier(prep, fwd), classifier(prep, bwd))
    f = ev.figures
    assert f["bidirectional"] and f["backward"]["accuracy"] == 0.0
    assert f["classifier"] == f["ensemble"]  # predict serves the ensemble
    assert f["accuracy"] == 1.0  # the reported, kept model: the forward classifier (blending is off)
    assert lines[2].startswith("bidirectional: backward macro-F1")


# --- the classifier stage after an interruption ----------------------------------------------------------------


class Weights:
    def __init__(self):
        self.loaded = []

    def load_state_dict(self, state):
        self.loaded.append(state)


def resumed_fit(*, past: bool, done: bool):
    restored = []
    position = SimpleNamespace(done=done)
    return SimpleNamespace(
        resume_point=lambda stage: None if past else position,
        resumed_past=lambda stage: past,
        carry={"classifier": {"model": "carried weights", "best": {"epoch": 1}}},
        resume=SimpleNamespace(payload={"model": "checkpoint weights"}),
        restore_best=lambda learn, stage, epochs: restored.append(epochs) or {"epoch": 3, "of": epochs},
    ), restored


def test_a_classifier_finished_before_the_interruption_is_taken_up_not_trained_again(monkeypatch):
    monkeypatch.setattr(clf_stage, "_fine_tuned", lambda *a, **k: pytest.fail("fine-tuned again"))
    a = SimpleNamespace(best_epoch=True, epochs_clf=4, min_clf_steps=0)
    lines = []
    rc = SimpleNamespace(a=a, log=SimpleNamespace(line=lines.append))
    dls = SimpleNamespace(train=range(5))

    fit, restored = resumed_fit(past=True, done=False)
    learn = SimpleNamespace(model=Weights())
    assert clf_stage._trained(rc, fit, None, learn, dls, None, None, "classifier") == {"epoch": 1}
    assert learn.model.loaded == ["carried weights"] and restored == []

    fit, restored = resumed_fit(past=False, done=True)
    learn = SimpleNamespace(model=Weights())
    assert clf_stage._trained(rc, fit, None, learn, dls, None, None, "classifier") == {"epoch": 3, "of": 4}
    assert learn.model.loaded == ["checkpoint weights"] and restored == [4]
    assert lines == [
        "classifier: finished before the interruption; using its weights",
        "classifier: finished before the interruption; evaluating its checkpoint",
    ]


def test_a_classifier_stopped_mid_stage_goes_on_fine_tuning_from_its_checkpoint(monkeypatch):
    calls = []
    monkeypatch.setattr(clf_stage, "_fine_tuned", lambda *a, fresh: calls.append(fresh) or {"epoch": 2})
    rc = SimpleNamespace(a=SimpleNamespace(), log=SimpleNamespace(line=print))
    fit, _ = resumed_fit(past=False, done=False)
    assert clf_stage._trained(rc, fit, None, None, None, None, None, "classifier") == {"epoch": 2}
    fit.resume_point = lambda stage: None  # no checkpoint of this stage: a fresh start from the encoder
    clf_stage._trained(rc, fit, None, None, None, None, None, "classifier")
    assert calls == [False, True]

"""The served model's padded batches give what fastai's get_preds gives, row for row.

The run is the session's (tests/e2e/conftest.py `trained_fr`). The reference is fastai's own path
(served_model._learner_probabilities, what predict ran before padded batches); the texts are a few hundred
of every shape: empty, blank, one word, capitals, unknown words, literal special tokens, texts of one
chunk and of many (where fastai's batches decide a row's result), longer than the encoder's max_len.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import random

import numpy as np
import pytest

from tests.support.project import SAMPLE
from tests.support.trainctl import run_dir


@pytest.fixture(scope="module")
def served(trained_fr):
    return classifier_served(trained_fr)


def classifier_served(trained_fr):
    from trainer.runfiles.metrics_file import RunMetrics
    from trainer.serving.served_model import ServedModel, load_learner_file

    project, run_id, _ = trained_fr
    folder = run_dir(project, "fr", run_id)
    metrics = RunMetrics.from_json((folder / "metrics.json").read_bytes())
    # The session's tiny run may keep TF-IDF alone, which serves no classifier: these tests are the classifier's
    # batches, so it is served as the kept model
    classifier = dataclasses.replace(metrics, kept="classifier", blend_weight=None)
    model = ServedModel(metrics=classifier, learn=load_learner_file(folder / "model.pth"))
    assert model.text_model is not None, "the trained classifier is not served on padded batches"
    return model


def varied_texts(count: int = 300) -> list[str]:
    sample = [row["text"] for row in csv.DictReader(open(SAMPLE / "fr" / "train.csv", encoding="utf-8"))]
    rng = random.Random(7)
    texts = [
        "",
        " ",
        "\n\t",
        "a",
        "?!",
        "xxbos xxpad xxunk",
        "COLIS PERDU ÉNORME",
        "zzqx wvyk qqq",
        "Remboursement " * 2000,
    ]  # the last: thousands of tokens, past the encoder's max_len
    while len(texts) < count:
        words = rng.choice([1, 1, 1, 2, 3, 6, 30, 90])  # many texts of one chunk, some of several
        texts.append(" ".join(rng.choice(sample) for _ in range(words)) + f" ({len(texts)})")
    rng.shuffle(texts)
    return texts


def test_token_ids_are_fastais(served):
    from trainer.serving.padded_batches import token_ids

    texts = varied_texts(120)
    tokenizer, vocab_ids = served.text_model.tokenizer, served.text_model.vocab_ids
    expected = [[vocab_ids[token] for token in tokenizer(text)] for text in texts]
    assert [row.tolist() for row in token_ids(served.text_model, texts)] == expected


@pytest.mark.parametrize("count", [1, 33, 300])
def test_same_probabilities_and_labels_as_get_preds(served, count):
    from trainer.serving.padded_batches import probabilities
    from trainer.serving.served_model import _learner_probabilities

    texts = varied_texts(300)[:count]
    expected = _learner_probabilities(served.learn, texts)
    got = probabilities(served.text_model, texts)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert served.decide(got) == served.decide(expected)
    # and the whole served model (a blend's TF-IDF part included) against the same model on fastai's path
    reference = copy.copy(served)
    reference.text_model = None
    labels, probs = served.predict(texts)
    expected_labels, expected_probs = reference.predict(texts)
    np.testing.assert_allclose(probs, expected_probs, rtol=0, atol=1e-6)
    assert labels == expected_labels


def test_batches_classified_at_once_on_threads_give_what_one_at_a_time_gives(trained_fr, served):
    """Each batch running at once takes a model module of its own (the AWD-LSTM keeps its batch's state on the
    module; the weights are shared): four batches on two threads, held so that they overlap, give each batch's
    probabilities to the bit."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import torch

    texts = varied_texts(300)
    batches = [texts[n : n + 75] for n in range(0, 300, 75)]
    expected = [served.probabilities(batch) for batch in batches]
    at_once = classifier_served(trained_fr)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # a worker pinned to one core has one
    try:
        assert at_once.use_cores(2) == 2
        assert torch.get_num_threads() == 1  # one torch thread a batch
        both = threading.Barrier(2)

        def probabilities(batch):
            both.wait(60)  # the two threads' forward passes overlap
            return at_once.probabilities(batch)

        with ThreadPoolExecutor(2) as pool:
            got = list(pool.map(probabilities, batches))
    finally:
        torch.set_num_threads(threads)
    for one, other in zip(got, expected):
        np.testing.assert_array_equal(one, other)
    weights = {p.data_ptr() for p in at_once.text_model.model.parameters()}
    copy = at_once._free.get()
    copy = copy if copy is not at_once.text_model else at_once._free.get()
    assert {p.data_ptr() for p in copy.model.parameters()} == weights  # the module copied, not its weights

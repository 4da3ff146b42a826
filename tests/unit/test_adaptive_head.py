"""The adaptive softmax head (trainer.lm.adaptive): its clusters, its loss, and the layout it publishes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.lm import adaptive

fastai_text = pytest.importorskip("fastai.text.all")


def zipf(n: int) -> np.ndarray:
    return (1e6 / np.arange(1, n + 1)).astype(np.int64)


def test_cutoffs_follow_the_token_mass():
    counts = zipf(15000)
    cuts = adaptive.cutoffs(counts)
    share = np.cumsum(counts) / counts.sum()
    assert len(cuts) == 2 and cuts[0] < cuts[1] < 15000 and all(c % 8 == 0 for c in cuts)
    assert share[cuts[0] - 1] >= 0.8 and share[cuts[0] - 9] < 0.8  # the first multiple of 8 past 80 %
    assert share[cuts[1] - 1] >= 0.95


@pytest.mark.parametrize("n", [2, 9, 16, 40])
def test_a_tiny_vocabulary_still_gets_a_valid_head(n):
    cuts = adaptive.cutoffs(zipf(n))
    assert cuts and all(0 < c < n for c in cuts) and cuts == sorted(set(cuts))
    dec = adaptive.AdaptiveDecoder(torch.nn.Embedding(n, 8), 0.1, zipf(n))
    assert dec.n_clusters == len(cuts)
    assert torch.allclose(dec.log_prob(torch.randn(3, 8)).exp().sum(dim=1), torch.ones(3), atol=1e-5)


def _decoder(vocab=200, hid=16):
    torch.manual_seed(0)
    return adaptive.AdaptiveDecoder(torch.nn.Embedding(vocab, hid), 0.0, zipf(vocab)).eval()


def test_before_any_step_the_head_predicts_the_unigram_distribution():
    """Biases start at log frequencies and cluster scorers at each cluster's share, so a pretrain starts from
    the unigram model rather than from uniform guesses over 15,000 words."""
    dec = _decoder()
    assert torch.allclose(dec.log_prob(torch.zeros(1, 16))[0], adaptive.log_unigram(zipf(200)), atol=1e-5)


def test_every_word_is_scored_against_its_own_embedding():
    """Tied as fastai's full softmax: one Parameter, listed once, and the loss's gradient reaches the
    rare words' input vectors."""
    config = {**fastai_text.awd_lstm_lm_config, "emb_sz": 16, "n_hid": 32, "n_layers": 1}
    model = adaptive.language_model(200, config, 0.3, zipf(200))
    assert model[1].weight is model[0].encoder.weight
    assert sum(p is model[0].encoder.weight for p in model.parameters()) == 1
    hidden, targ = torch.randn(1, 4, 16), torch.full((1, 4), 199)  # the rarest word, in the last cluster
    adaptive.AdaptiveLoss(model[1])(hidden, targ).backward()
    assert model[0].encoder.weight.grad[199].abs().sum() > 0


def test_the_loss_is_the_exact_negative_log_likelihood():
    dec = _decoder()
    hidden, targ = torch.randn(2, 5, 16), torch.randint(0, 200, (2, 5))
    loss = adaptive.AdaptiveLoss(dec)(hidden, targ)
    full = dec.log_prob(hidden.reshape(-1, 16))  # every word's log-probability: sums to one
    assert torch.allclose(full.exp().sum(dim=1), torch.ones(10), atol=1e-5)
    assert loss.item() == pytest.approx(-full.gather(1, targ.reshape(-1, 1)).mean().item(), rel=1e-5)


def test_the_loss_runs_in_fp32_under_bf16_autocast():
    dec, proj = _decoder(), torch.nn.Linear(16, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = proj(torch.randn(2, 5, 16))
        assert hidden.dtype == torch.bfloat16
        loss = adaptive.AdaptiveLoss(dec)(hidden, torch.randint(0, 200, (2, 5)))
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


def test_every_head_parameter_gets_a_gradient_even_when_no_target_is_rare():
    """Data parallelism (DDP) waits for every parameter's gradient at each step."""
    dec = _decoder()
    adaptive.AdaptiveLoss(dec)(torch.randn(1, 4, 16), torch.zeros(1, 4, dtype=torch.long)).backward()
    assert all(p.grad is not None for p in dec.parameters())


def test_token_accuracy_is_the_share_of_most_likely_words():
    dec = _decoder()
    hidden = torch.randn(3, 4, 16)
    best = dec.log_prob(hidden.reshape(-1, 16)).argmax(dim=1).reshape(3, 4)
    targ = best.clone()
    targ[0] = (targ[0] + 1) % 200  # a third of the positions wrong
    assert adaptive.token_accuracy(dec)(hidden, targ).item() == pytest.approx(8 / 12)


def test_the_published_layout_loads_into_fastais_full_softmax_language_model():
    from fastai.text.all import AWD_LSTM, awd_lstm_lm_config, get_language_model

    config = {**awd_lstm_lm_config, "emb_sz": 16, "n_hid": 32, "n_layers": 1}
    counts = zipf(64)
    model = adaptive.language_model(64, config, 0.3, counts)
    state = adaptive.published_state(model)
    full = get_language_model(AWD_LSTM, 64, config=config, drop_mult=0.3)
    assert set(state) == set(full.state_dict())
    full.load_state_dict(state)
    assert torch.equal(full[1].decoder.weight, full[0].encoder.weight)  # tied, as fastai's own
    assert torch.allclose(full[1].decoder.bias.exp().sum(), torch.tensor(1.0))
    assert int(full[1].decoder.bias.argmax()) == 0  # the most frequent word is the most likely a priori
    assert adaptive.published_state(full).keys() == full.state_dict().keys()  # a full-softmax LM as it is


def test_fine_tuning_under_the_adaptive_head_loads_the_base_encoder(tmp_path):
    """trainer.stages.base_lm.load_weights: a full-softmax base LM's encoder arrives (words matched by the vocabulary),
    the adaptive head scores words against it; its biases and cluster scorers stay as initialised."""
    import pickle
    from types import SimpleNamespace

    from fastai.text.all import AWD_LSTM, awd_lstm_lm_config, get_language_model

    from trainer.stages.base_lm import load_weights

    config = {**awd_lstm_lm_config, "emb_sz": 16, "n_hid": 32, "n_layers": 2}
    base_vocab = ["xxunk", "xxpad", "xxbos", *[f"w{i}" for i in range(3, 40)]]
    torch.manual_seed(1)
    base = get_language_model(AWD_LSTM, 40, config=config, drop_mult=0.3)
    torch.save(base.state_dict(), tmp_path / "weights.pth")
    (tmp_path / "vocab.pkl").write_bytes(pickle.dumps(base_vocab))
    new_vocab = ["w3", "xxunk", "new", *[f"w{i}" for i in range(4, 40)], "xxpad", "xxbos"]  # reordered, one new word
    model = adaptive.language_model(len(new_vocab), config, 0.3, zipf(len(new_vocab)))
    head = {k: v.clone() for k, v in model[1].state_dict().items() if k != "weight"}
    learn = SimpleNamespace(model=model, freeze=lambda: None)
    load_weights(learn, tmp_path, new_vocab)
    emb = model[0].encoder.weight
    assert torch.equal(emb[0], base[0].encoder.weight[3]) and torch.equal(emb[1], base[0].encoder.weight[0])
    assert torch.equal(emb[-1], base[0].encoder.weight[2])
    assert torch.allclose(emb[2], base[0].encoder.weight.mean(0))  # an unknown word: the mean embedding
    for name in ("rnns.0.weight_hh_l0_raw", "rnns.1.module.weight_ih_l0"):
        assert torch.equal(model[0].state_dict()[name], base[0].state_dict()[name])
    assert all(torch.equal(v, model[1].state_dict()[k]) for k, v in head.items())
    assert torch.equal(model[1].weight, emb)


def test_lm_ids_of_the_tied_head_differ_from_the_untied_heads():
    """The first adaptive head (untied) shaped ids with ["lm_head", "adaptive"]: a tied pretrain must not find
    such an LM "already published" (or an inline one cached) and reuse it; full-softmax ids gain nothing."""
    assert adaptive.id_part("full") == []
    assert adaptive.id_part("adaptive") not in ([], [["lm_head", "adaptive"]])

"""LM fine-tuning reads a different part of the unlabelled texts each epoch (trainer.lm.parts), with a real
fastai learner: each epoch trains on its own part, every part runs as many batches, on every rank."""

from __future__ import annotations

import numpy as np

from trainer.lm.parts import plan
from trainer.text.tokens import TokenIds


def _table(n_docs: int = 60, length: int = 40) -> TokenIds:
    """Documents whose tokens name their document: doc d is `length` copies of word d (ids 2..)."""
    vocab = ["xxunk", "xxpad", *[f"w{d}" for d in range(n_docs)]]
    ids = np.concatenate([np.full(length, d + 2, dtype=np.int32) for d in range(n_docs)])
    return TokenIds(vocab, ids, np.arange(0, n_docs * length + 1, length, dtype=np.int64))


def test_every_epoch_trains_on_its_own_part_with_as_many_batches():
    from fastai.callback.core import Callback
    from fastai.text.all import AWD_LSTM, ProgressCallback, awd_lstm_lm_config, language_model_learner

    from trainer.lm.train import EpochPartCallback
    from trainer.text.loaders import lm_part_dataloaders

    tokens = _table()
    p = plan(tokens.lengths(), n_always=2, epochs=3, budget=3 * 600, seed=0)
    assert p is not None and len(p.parts) == 3
    dls, loaders = lm_part_dataloaders(tokens, p.parts, p.valid, bs=4, seq_len=10)
    assert len({len(dl) for dl in loaders}) == 1  # one batch count for every part

    seen: list[set] = []

    class Seen(Callback):
        def before_epoch(self):
            seen.append(set())

        def after_batch(self):
            if self.training:
                seen[-1].update((self.xb[0].unique() - 2).tolist())

    config = {**awd_lstm_lm_config, "emb_sz": 8, "n_hid": 16, "n_layers": 1}
    learn = language_model_learner(dls, AWD_LSTM, config=config, pretrained=False)
    learn.remove_cb(ProgressCallback)
    learn.add_cbs([EpochPartCallback(loaders), Seen()])
    learn.fit(3, 1e-3)
    for epoch, part in enumerate(p.parts):
        assert seen[epoch] <= set(part.tolist())  # what an epoch read is its part's documents only
        assert {0, 1} & seen[epoch]  # and the training rows are in every one
        assert len(seen[epoch] - {0, 1}) >= 5
    assert not (seen[0] - {0, 1}) & (seen[1] - {0, 1})  # different unlabelled texts each epoch
    assert not set(p.valid.tolist()) & set().union(*seen)


def test_every_rank_runs_the_same_number_of_batches_in_every_part():
    from trainer.text.loaders import lm_part_dataloaders

    tokens = _table(n_docs=61, length=37)
    p = plan(tokens.lengths(), n_always=3, epochs=4, budget=4 * 500, seed=1)
    lengths = {
        len(dl)
        for rank in (0, 1)
        for dl in lm_part_dataloaders(tokens, p.parts, p.valid, bs=2, seq_len=8, rank=rank, world=2)[1]
    }
    assert len(lengths) == 1

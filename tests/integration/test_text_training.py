"""trainer.text with real work: tokenizer worker processes, and fastai models trained from token ids."""

from __future__ import annotations

import os
import signal
import time
import warnings

import numpy as np
import pytest

from tests.support.text import ODD_TEXTS, fastai_tokens, sample_ids, sample_rows
from trainer.text.tokens import TokenizerPool, tokenize


@pytest.fixture(scope="module")
def fr():
    return sample_rows("fr")


@pytest.fixture(scope="module")
def fr_ids(fr):
    return sample_ids(fr)


def test_pool_and_in_process_give_identical_ids():
    long_text = " ".join(["mot", "très", "long"] * 20_000)  # ~200k characters
    texts = ODD_TEXTS * 5 + [long_text]
    alone = tokenize(texts, "fr", workers=1, chunk_rows=7)
    pooled = tokenize((t for t in texts), "fr", workers=2, chunk_rows=7)  # a generator, 6 chunks
    assert alone == pooled
    assert alone.ids.dtype == np.int32 and alone.offsets.dtype == np.int64 and len(alone) == len(texts)
    expected = fastai_tokens(ODD_TEXTS)
    assert [[alone.vocab[i] for i in alone.text(n)] for n in range(len(ODD_TEXTS))] == expected
    assert alone.lengths()[-1] == 60_001  # xxbos + one token per word: nothing truncated


class Interrupted(Exception):
    """Like the trainer's: raised by its signal handler wherever the main thread is."""


def test_workers_ignore_signals_and_end_when_the_parent_raises():
    seen: list[int] = []

    def texts(pool):
        yield from ODD_TEXTS * 4
        seen.extend(pool.worker_pids())
        raise Interrupted()  # mid-stream

    with pytest.raises(Interrupted):
        with TokenizerPool("fr", 2, chunk_rows=4) as pool:
            pool.tokenize(texts(pool))
    assert len(seen) == 2 and _all_gone(seen)

    previous = signal.signal(signal.SIGALRM, _raise_interrupted)
    try:
        with pytest.raises(Interrupted):
            with TokenizerPool("fr", 2, chunk_rows=4) as pool:
                expected = tokenize(ODD_TEXTS * 2, "fr", workers=1)
                assert pool.tokenize(ODD_TEXTS * 2) == expected  # starts the workers
                pids = pool.worker_pids()
                for pid in pids:  # Ctrl-C or a stop reaches the process group: the workers leave it to us
                    os.kill(pid, signal.SIGINT)
                    os.kill(pid, signal.SIGTERM)
                assert pool.tokenize(ODD_TEXTS * 2) == expected
                assert pool.worker_pids() == pids
                processes = list(pool._executor._processes.values())
                signal.setitimer(signal.ITIMER_REAL, 0.3)
                while True:  # the handler raises while we wait on the workers
                    pool.tokenize(["phrase numéro un " * 5_000] * 8)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _all_gone(pids)
    assert [p.exitcode for p in processes] == [-signal.SIGKILL] * 2  # killed, not left to finish


def _raise_interrupted(signum, frame):
    raise Interrupted()


def _all_gone(pids: list[int], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_language_model_trains_from_ids(tmp_path, fr_ids):
    from fastai.text.all import AWD_LSTM, awd_lstm_lm_config, language_model_learner

    from trainer.text.loaders import lm_dataloaders

    dls = lm_dataloaders(fr_ids, bs=8, seq_len=16, seed=1)
    learn = language_model_learner(
        dls,
        AWD_LSTM,
        config={**awd_lstm_lm_config, "emb_sz": 16, "n_hid": 32, "n_layers": 1},
        pretrained=False,
        path=tmp_path,
    )
    with learn.no_bar(), learn.no_logging():
        learn.fit(1, 1e-2)
    assert learn.model[0].encoder.weight.shape[0] == len(fr_ids.vocab)
    assert np.isfinite(learn.recorder.values[-1]).all()


def test_classifier_from_ids_exports_a_raw_text_model(tmp_path, fr, fr_ids):
    from fastai.text.all import AWD_LSTM, awd_lstm_clas_config, load_learner, text_classifier_learner

    from trainer.text.loaders import classifier_dataloaders, raw_text_dataloaders

    rows = list(range(48))
    ids = fr_ids.select(rows)
    splits = (rows[:36], rows[36:])
    dls = classifier_dataloaders(
        ids, [fr.labels[i] for i in rows], multi_label=True, label_names=fr.label_names, splits=splits, bs=8, seq_len=16
    )
    learn = text_classifier_learner(
        dls,
        AWD_LSTM,
        config={**awd_lstm_clas_config, "emb_sz": 16, "n_hid": 32, "n_layers": 1},
        pretrained=False,
        seq_len=16,
        path=tmp_path,
    )
    with learn.no_bar(), learn.no_logging():
        learn.fit(1, 1e-2)
        probs, targets = learn.get_preds(ds_idx=1)
    expected = [[int(name in fr.labels[i]) for name in fr.label_names] for i in splits[1]]
    assert targets.int().tolist() == expected  # in the order of the validation rows
    learn.dls = raw_text_dataloaders(learn.dls, "fr", ids.vocab, fr.label_names, True)
    learn.export(tmp_path / "model.pth")
    assert (tmp_path / "model.pth").stat().st_size < 5_000_000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = load_learner(tmp_path / "model.pth", cpu=True)
    with loaded.no_bar():
        _, _, p = loaded.predict("Mon colis n'est jamais arrivé, je veux être remboursé.")
    assert p.shape == (len(fr.label_names),) and ((0 <= p) & (p <= 1)).all()


def test_an_exported_sentencepiece_pipeline_loads_with_plain_fastai(tmp_path):
    """The export pickles fastai and stdlib objects only: no `trainer` import to load it (a fresh
    interpreter loads it: an integration test, ~15 s)."""
    import pickle
    import subprocess
    import sys

    from fastai.text.all import Tokenizer

    from trainer.text.tokenizers import SENTENCEPIECE, TokenizerSpec, rules, train_sentencepiece

    JAPANESE = ["荷物がまだ届いていません", "請求書の金額が間違っています", "パスワードを忘れました"] * 10

    spec = TokenizerSpec(SENTENCEPIECE, "ja", train_sentencepiece(JAPANESE * 3, vocab_size=120, code="ja"))
    tok = Tokenizer(spec.fastai_tokenizer(tmp_path / "cache"), rules=rules())
    expected = list(tok(JAPANESE[1]))
    (tmp_path / "tok.pkl").write_bytes(pickle.dumps(tok))
    (tmp_path / "cache" / "spm.model").unlink()  # the model travels inside the pickle
    code = (
        "import sys, pickle; sys.modules['trainer'] = None; "
        f"tok = pickle.load(open({str(tmp_path / 'tok.pkl')!r}, 'rb')); print(list(tok({JAPANESE[1]!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(expected)

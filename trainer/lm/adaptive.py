"""An adaptive softmax head for AWD-LSTM language models (`trainer.lm_head: adaptive`).

A full softmax multiplies every position's output by the whole vocabulary: most of a CPU step
(docs/BENCHMARKS.md "Base LMs on 2 cores"). An adaptive softmax (Grave et al. 2017) scores a
shortlist of frequent words plus one token per cluster of rarer words at every position, and a
cluster's words only at the positions whose target is in it. Its log-likelihood is exact: the
perplexity a pretrain reports is the adaptive head's, over the same words.

Every word is scored against its own embedding, as in fastai's tied full softmax (the head has no
projections of its own, only a bias per word and one scorer per cluster). An untied head (torch's
AdaptiveLogSoftmaxWithLoss, projections 4x narrower per cluster) was measured first: it learnt
nothing from 500k-token corpora (el perplexity 1,091 against the full softmax's 115,
docs/DECISIONS.md "Adaptive softmax LM head"); tied, the rare words learn from every
sentence they appear in as inputs, and a fine-tune starts from the base LM's word vectors.

Only the head changes: the encoder stays fastai's AWD-LSTM, and a published LM is written in the
tied full-softmax layout every reader of weights.pth takes (`published_state`: the decoder is the
embedding, its bias the log unigram frequencies), so the classifier, `lm import`/`use` and
fine-tuning read it as they read any LM. A fine-tune with this head scores the task's vocabulary
against the matched embedding from any base LM, old ones included; its biases and cluster scorers
start afresh from the task's word counts.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

FULL, ADAPTIVE = "full", "adaptive"
# In every LM id shaped by this head: LMs of the first, untied head (same setting name) get other ids, so
# a tied pretrain never finds an untied one "already published" (or an inline one cached) and reuses it.
ID_MARK = "tied"
# Token mass the shortlist covers, then the shortlist and the first cluster together; the last
# cluster takes the rest.
SHARES = (0.8, 0.95)


def cutoffs(counts: np.ndarray, shares: tuple[float, ...] = SHARES) -> list[int]:
    """Cluster boundaries over token ids from their training counts: the first id whose running
    share of all tokens reaches each of `shares`, rounded up to a multiple of 8 (ids are in
    frequency order, fastai's make_vocab). At least one boundary, each inside (0, len(counts))."""
    n = len(counts)
    total = max(float(np.sum(counts)), 1.0)
    running = np.cumsum(counts) / total
    out: list[int] = []
    for share in shares:
        k = int(np.searchsorted(running, share)) + 1
        k = min(max(-(-k // 8) * 8, 8), n - 1)
        if 0 < k < n and (not out or k > out[-1]):
            out.append(k)
    return out or [max(1, n // 2)]


def id_part(head: str) -> list:
    """What the head adds to an LM id (full-softmax ids carry nothing: they stay as they were)."""
    return [] if head == FULL else [["lm_head", head, ID_MARK]]


def log_unigram(counts: np.ndarray) -> torch.Tensor:
    """log p(word) from training counts (add-one): the published decoder's bias."""
    c = np.asarray(counts, dtype=np.float64) + 1.0
    return torch.tensor(np.log(c / c.sum()), dtype=torch.float32)


class AdaptiveDecoder(nn.Module):
    """In place of fastai's LinearDecoder: dropout on the encoder's output, and the adaptive softmax the
    loss calls, its word scores tied to `embedding`."""

    def __init__(self, embedding: nn.Embedding, output_p: float, counts: np.ndarray):
        super().__init__()
        from fastai.text.models.awdlstm import RNNDropout

        n_words, n_hid = embedding.weight.shape
        self.output_dp = RNNDropout(output_p)
        self.bounds = [0, *cutoffs(counts), n_words]  # the shortlist, then each cluster: ids [bounds[i], bounds[i+1])
        self.weight = embedding.weight  # the same Parameter: fastai's splitter keeps them in one group
        prior = log_unigram(counts)
        # Biases start at the words' log frequency within their own softmax, the cluster scorers at each
        # cluster's share: the head predicts the unigram distribution before its first step.
        self.bias = nn.Parameter(prior.clone())
        self.cluster = nn.Linear(n_hid, len(self.bounds) - 2)
        with torch.no_grad():
            self.cluster.weight.zero_()
            for i, (lo, hi) in enumerate(self._clusters()):
                self.cluster.bias[i] = torch.logsumexp(prior[lo:hi], 0)
        self.register_buffer("log_unigram", prior)

    @property
    def n_clusters(self) -> int:
        return len(self.bounds) - 2

    def _clusters(self):
        return list(zip(self.bounds[1:-1], self.bounds[2:]))

    def describe(self) -> str:
        """`a shortlist of 2,000 of 15,000 words, then clusters up to 8,000 and 15,000`."""
        tail = ", ".join(f"{b:,}" for b in self.bounds[2:])
        return f"a shortlist of {self.bounds[1]:,} of {self.bounds[-1]:,} words, then clusters up to {tail}"

    def forward(self, input):
        dropped = self.output_dp(input)
        # LinearDecoder's (prediction, raw output, dropped output): fastai's RNN callbacks read the last two;
        # the "prediction" is the hidden state the loss scores
        return dropped, input, dropped

    def _scores(self, hidden: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        return torch.nn.functional.linear(hidden, self.weight[lo:hi], self.bias[lo:hi])

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """log p(shortlist word or cluster) at each position."""
        return torch.cat([self._scores(hidden, 0, self.bounds[1]), self.cluster(hidden)], 1).log_softmax(1)

    def target_log_prob(self, hidden: torch.Tensor, targ: torch.Tensor) -> torch.Tensor:
        """log p(target) at each of hidden's (N, n_hid) positions; a cluster is scored only where a target is in it."""
        short = self.bounds[1]
        head = self._head(hidden)
        out = head.gather(1, targ.clamp(max=short - 1).unsqueeze(1)).squeeze(1)
        for i, (lo, hi) in enumerate(self._clusters()):
            rows = ((targ >= lo) & (targ < hi)).nonzero().squeeze(1)
            if rows.numel():
                inside = self._scores(hidden.index_select(0, rows), lo, hi).log_softmax(1)
                got = inside.gather(1, (targ.index_select(0, rows) - lo).unsqueeze(1)).squeeze(1)
                out = out.index_copy(0, rows, got + head.index_select(0, rows)[:, short + i])
        return out

    def log_prob(self, hidden: torch.Tensor) -> torch.Tensor:
        """Every word's log-probability at each position (N, n_words): what a full softmax would give."""
        short, head = self.bounds[1], self._head(hidden)
        parts = [head[:, :short]]
        parts += [
            self._scores(hidden, lo, hi).log_softmax(1) + head[:, short + i : short + i + 1]
            for i, (lo, hi) in enumerate(self._clusters())
        ]
        return torch.cat(parts, 1)

    def predict(self, hidden: torch.Tensor) -> torch.Tensor:
        """The most likely word at each position; a whole vocabulary is scored only where a cluster
        beats the shortlist."""
        short, head = self.bounds[1], self._head(hidden)
        best = head.argmax(1)
        rows = (best >= short).nonzero().squeeze(1)
        if rows.numel():
            best = best.index_copy(0, rows, self.log_prob(hidden.index_select(0, rows)).argmax(1))
        return best


class AdaptiveLoss:
    """Negative log-likelihood of the targets under the decoder's adaptive softmax (fastai's loss_func)."""

    def __init__(self, decoder: AdaptiveDecoder):
        self.decoder = decoder

    def __call__(self, pred: torch.Tensor, targ: torch.Tensor) -> torch.Tensor:
        # fp32 under autocast: log-probabilities of rare words need its range
        with torch.autocast(pred.device.type, enabled=False):
            return -self.decoder.target_log_prob(pred.float().reshape(-1, pred.shape[-1]), targ.reshape(-1)).mean()


def token_accuracy(decoder: AdaptiveDecoder):
    """The metric fastai's `accuracy` is for a full softmax: the most likely word is the target."""

    def accuracy(pred: torch.Tensor, targ: torch.Tensor) -> torch.Tensor:
        with torch.autocast(pred.device.type, enabled=False):
            words = decoder.predict(pred.float().reshape(-1, pred.shape[-1]))
        return (words == targ.reshape(-1)).float().mean()

    return accuracy


def published_state(model) -> dict:
    """The LM's state dict in the tied full-softmax layout: the encoder's weights, the decoder as the
    embedding and its bias as the log unigram frequencies (an adaptive head's own weights stay behind)."""
    state = model.state_dict()
    if not isinstance(model[1], AdaptiveDecoder):
        return state
    out = {k: v for k, v in state.items() if k.startswith("0.")}
    out["1.decoder.weight"] = state["0.encoder.weight"].clone()
    out["1.decoder.bias"] = state["1.log_unigram"].clone()
    return out


def language_model(vocab_sz: int, config: dict, drop_mult: float, counts: np.ndarray):
    """fastai's get_language_model(AWD_LSTM, ...) with an AdaptiveDecoder in place of the tied linear one."""
    from fastai.text.all import AWD_LSTM, SequentialRNN

    config = {k: v * drop_mult if k.endswith("_p") else v for k, v in config.items()}
    output_p = config.pop("output_p")
    for key in ("tie_weights", "out_bias", "init"):
        config.pop(key, None)
    encoder = AWD_LSTM(vocab_sz, **config)
    return SequentialRNN(encoder, AdaptiveDecoder(encoder.encoder, output_p, counts))

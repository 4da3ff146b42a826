"""An adaptive softmax head for AWD-LSTM language models (`trainer.lm_head: adaptive`).

A full softmax multiplies every position's output by the whole vocabulary: most of a CPU step
(docs/BENCHMARKS.md "Base LMs on 2 cores"). torch's AdaptiveLogSoftmaxWithLoss (Grave et al.
2017) scores a shortlist of frequent words plus one token per cluster of rarer words at every
position, and a cluster's words only at the positions whose target is in it. Its log-likelihood
is exact: the perplexity a pretrain reports is the adaptive head's, over the same words.

Only the head changes: the encoder stays fastai's AWD-LSTM, and a published LM is written in the
tied full-softmax layout every reader of weights.pth takes (`published_state`: the decoder is the
embedding, its bias the log unigram frequencies), so the classifier, `lm import`/`use` and
fine-tuning read it as they read any LM. That full-softmax decoder is a starting point, not the
head the perplexity was measured with (a full-softmax fine-tune re-fits it in its frozen first
epoch). A fine-tune with this head starts a fresh one on the task's own vocabulary (the first,
frozen epoch fits it), from any base LM, old ones included.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

FULL, ADAPTIVE = "full", "adaptive"
# Token mass the shortlist covers, then the shortlist and the first cluster together; the last
# cluster takes the rest. A rarer cluster's projection is DIV_VALUE times narrower.
SHARES = (0.8, 0.95)
DIV_VALUE = 4.0
MIN_WIDTH = 4  # the narrowest cluster projection kept; a narrower one merges into the cluster before it


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


def log_unigram(counts: np.ndarray) -> torch.Tensor:
    """log p(word) from training counts (add-one): the published decoder's bias."""
    c = np.asarray(counts, dtype=np.float64) + 1.0
    return torch.tensor(np.log(c / c.sum()), dtype=torch.float32)


class AdaptiveDecoder(nn.Module):
    """In place of fastai's LinearDecoder: dropout on the encoder's output, and the adaptive softmax the loss calls."""

    def __init__(self, n_out: int, n_hid: int, output_p: float, counts: np.ndarray):
        super().__init__()
        from fastai.text.models.awdlstm import RNNDropout

        self.output_dp = RNNDropout(output_p)
        cuts = cutoffs(counts)
        while len(cuts) > 1 and n_hid // DIV_VALUE ** len(cuts) < MIN_WIDTH:
            cuts.pop()
        self.asm = nn.AdaptiveLogSoftmaxWithLoss(n_hid, n_out, cuts, div_value=DIV_VALUE)
        self.register_buffer("log_unigram", log_unigram(counts))

    def describe(self) -> str:
        """`a shortlist of 2,000 words, clusters up to 8,000 and 15,000`."""
        bounds = [*self.asm.cutoffs]
        tail = ", ".join(f"{b:,}" for b in bounds[1:])
        return f"a shortlist of {bounds[0]:,} of {self.asm.n_classes:,} words, then clusters up to {tail}"

    def forward(self, input):
        dropped = self.output_dp(input)
        # LinearDecoder's (prediction, raw output, dropped output): fastai's RNN callbacks read the last two;
        # the "prediction" is the hidden state the loss scores
        return dropped, input, dropped


class AdaptiveLoss:
    """Negative log-likelihood of the targets under the decoder's adaptive softmax (fastai's loss_func)."""

    def __init__(self, decoder: AdaptiveDecoder):
        self.decoder = decoder

    def __call__(self, pred: torch.Tensor, targ: torch.Tensor) -> torch.Tensor:
        asm = self.decoder.asm
        # fp32 under autocast: the head assembles its output with index_copy_, which refuses bf16 into fp32
        with torch.autocast(pred.device.type, enabled=False):
            loss = asm(pred.float().reshape(-1, pred.shape[-1]), targ.reshape(-1)).loss
        # A cluster no target of this batch fell into gets no gradient; data parallelism (DDP) waits for
        # every parameter's, so each takes part with weight zero.
        return loss + 0.0 * sum(p.reshape(-1)[0] for p in asm.parameters())


def token_accuracy(decoder: AdaptiveDecoder):
    """The metric fastai's `accuracy` is for a full softmax: the most likely word is the target."""

    def accuracy(pred: torch.Tensor, targ: torch.Tensor) -> torch.Tensor:
        with torch.autocast(pred.device.type, enabled=False):
            words = decoder.asm.predict(pred.float().reshape(-1, pred.shape[-1]))
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
    return SequentialRNN(encoder, AdaptiveDecoder(vocab_sz, config["emb_sz"], output_p, counts))

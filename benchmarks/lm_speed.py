"""Benchmark: language-model training speed (tokens/s) per AWD-LSTM size and vocabulary size.

    .venv/bin/python -m benchmarks.lm_speed [--batches 12] [--bs 32] [--seq-len 72]
        [--arch 200/400/2 400/1152/3] [--vocab 8000 15000 30000 60000]

The step a base-LM pretrain repeats: forward, backward and an Adam step of fastai's
AWD-LSTM language model (weights tied, fastai's dropouts, drop_mult 0.3) on a bs x seq_len
batch of random ids, in this process's threads (torch's default: one per core). The first two
batches warm up; the rest are timed. The decoder's softmax over the vocabulary grows with
vocab size, the LSTM with the arch: the table shows which to cut to make an epoch fit.
It also prints the hours an epoch over a corpus of --corpus-tokens would take at each rate.
"""
from __future__ import annotations

import argparse
import platform
import time


def tokens_per_s(emb: int, hid: int, layers: int, vocab: int, *, bs: int, seq_len: int, batches: int) -> float:
    import torch
    from fastai.text.all import AWD_LSTM, awd_lstm_lm_config, get_language_model

    torch.manual_seed(0)
    config = {**awd_lstm_lm_config, "emb_sz": emb, "n_hid": hid, "n_layers": layers}
    model = get_language_model(AWD_LSTM, vocab, config=config, drop_mult=0.3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    model.reset()
    x = torch.randint(0, vocab, (bs, seq_len + 1))
    warmup, started = 2, None
    for i in range(batches + warmup):
        if i == warmup:
            started = time.perf_counter()
        out = model(x[:, :-1])[0]
        loss = loss_fn(out.reshape(-1, vocab), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return batches * bs * seq_len / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--bs", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=72)
    parser.add_argument("--arch", nargs="+", default=["200/400/2", "400/1152/3"], help="emb/hid/layers")
    parser.add_argument("--vocab", nargs="+", type=int, default=[8000, 15000, 30000, 60000])
    parser.add_argument("--corpus-tokens", type=float, default=10e6, help="for the hours-per-epoch column")
    args = parser.parse_args()
    import torch

    print(f"# {platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}, "
          f"bs {args.bs} x seq_len {args.seq_len}, {args.batches} timed batches")
    print(f"| arch (emb/hid/layers) | vocab | tokens/s | s per batch | hours per epoch of {args.corpus_tokens / 1e6:g} M tokens |")
    print("|---|---|---|---|---|")
    for arch in args.arch:
        emb, hid, layers = (int(v) for v in arch.split("/"))
        for vocab in args.vocab:
            rate = tokens_per_s(emb, hid, layers, vocab, bs=args.bs, seq_len=args.seq_len, batches=args.batches)
            print(f"| {arch} | {vocab:,} | {rate:,.0f} | {args.bs * args.seq_len / rate:.2f} | "
                  f"{args.corpus_tokens / rate / 3600:.2f} |", flush=True)


if __name__ == "__main__":
    main()

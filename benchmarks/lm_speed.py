"""Benchmark: language-model training speed (tokens/s) per AWD-LSTM size, vocabulary size, head and precision.

    .venv/bin/python -m benchmarks.lm_speed [--batches 12] [--bs 32] [--seq-len 72]
        [--arch 200/400/2 400/1152/3] [--vocab 8000 15000 30000 60000]
        [--head full adaptive] [--precision fp32 bf16]

The step a base-LM pretrain repeats: forward, backward and an Adam step of fastai's
AWD-LSTM language model (weights tied, fastai's dropouts, drop_mult 0.3) on a bs x seq_len
batch of random ids, in this process's threads (torch's default: one per core). The first two
batches warm up; the rest are timed. The decoder's softmax over the vocabulary grows with
vocab size, the LSTM with the arch: the table shows which to cut to make an epoch fit.
`--head adaptive` replaces the softmax with trainer.lm.adaptive's (clusters from Zipf-shaped
counts, as a corpus gives); `--precision bf16` runs the step under CPU bf16 autocast (only where
the CPU has avx512_bf16 / amx_bf16: oneDNN has no bf16 LSTM elsewhere; such rows say so).
It also prints the hours an epoch over a corpus of --corpus-tokens would take at each rate.
"""

from __future__ import annotations

import argparse
import platform
import time


def tokens_per_s(
    emb: int,
    hid: int,
    layers: int,
    vocab: int,
    *,
    bs: int,
    seq_len: int,
    batches: int,
    head: str = "full",
    precision: str = "fp32",
    device: str = "cpu",
) -> float:
    """Tokens/s of the LM step; `device` cuda: autocast on the GPU (bf16, or fp16 with loss scaling)."""
    import numpy as np
    import torch
    from fastai.text.all import AWD_LSTM, awd_lstm_lm_config, get_language_model

    from trainer.lm import adaptive

    torch.manual_seed(0)
    config = {**awd_lstm_lm_config, "emb_sz": emb, "n_hid": hid, "n_layers": layers}
    zipf = (1e7 / np.arange(1, vocab + 1)).astype(np.int64)  # word counts shaped like a corpus's
    if head == adaptive.ADAPTIVE:
        model = adaptive.language_model(vocab, config, 0.3, zipf)
        loss_fn = adaptive.AdaptiveLoss(model[1])
    else:
        model = get_language_model(AWD_LSTM, vocab, config=config, drop_mult=0.3)
        loss_fn = lambda out, y: torch.nn.functional.cross_entropy(out.float().reshape(-1, vocab), y.reshape(-1))  # noqa: E731
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    model.reset()
    # ids drawn from the same Zipf shape: an adaptive head's cost depends on how often rare words come
    x = torch.multinomial(torch.tensor(zipf / zipf.sum()), bs * (seq_len + 1), replacement=True).view(bs, -1)
    x = x.to(device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    warmup, started = 2, None
    for i in range(batches + warmup):
        if i == warmup:
            sync()
            started = time.perf_counter()
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(x[:, :-1])[0]
            loss = loss_fn(out, x[:, 1:])
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    sync()
    return batches * bs * seq_len / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--bs", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=72)
    parser.add_argument("--arch", nargs="+", default=["200/400/2", "400/1152/3"], help="emb/hid/layers")
    parser.add_argument("--vocab", nargs="+", type=int, default=[8000, 15000, 30000, 60000])
    parser.add_argument("--head", nargs="+", default=["full"], choices=["full", "adaptive"])
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=["fp32", "bf16"])
    parser.add_argument("--corpus-tokens", type=float, default=10e6, help="for the hours-per-epoch column")
    args = parser.parse_args()
    import torch

    from trainer.runtime.precision import cpu_bf16

    print(
        f"# {platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}, "
        f"bs {args.bs} x seq_len {args.seq_len}, {args.batches} timed batches"
    )
    print(f"# native bf16: {cpu_bf16() or 'none (no avx512_bf16 / amx_bf16)'}")
    print(
        f"| arch (emb/hid/layers) | vocab | head | precision | tokens/s | s per batch | "
        f"hours per epoch of {args.corpus_tokens / 1e6:g} M tokens |"
    )
    print("|---|---|---|---|---|---|---|")
    for arch in args.arch:
        emb, hid, layers = (int(v) for v in arch.split("/"))
        for vocab in args.vocab:
            for head in args.head:
                for precision in args.precision:
                    row = f"| {arch} | {vocab:,} | {head} | {precision} |"
                    if precision == "bf16" and not cpu_bf16():
                        print(f"{row} – | – | – (this CPU has no native bf16) |", flush=True)
                        continue
                    rate = tokens_per_s(
                        emb,
                        hid,
                        layers,
                        vocab,
                        bs=args.bs,
                        seq_len=args.seq_len,
                        batches=args.batches,
                        head=head,
                        precision=precision,
                    )
                    print(
                        f"{row} {rate:,.0f} | {args.bs * args.seq_len / rate:.2f} | "
                        f"{args.corpus_tokens / rate / 3600:.2f} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()

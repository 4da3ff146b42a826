"""What `trainctl lm import` accepts, checked before anything is written: a fastai language-model state dict
(`get_language_model(AWD_LSTM, ...)`; fastai's WT103 `lstm_fwd.pth` has this shape, and a `{"model": ...}`
file as `learn.save` writes) and its vocabulary pickle (a list of str, e.g. `itos_wt103.pkl`). A pair that
does not fit is refused with a DataError.

The state dict is normalised to the keys and key order of this fastai's model (fastai's `load_pretrained`
matches weights to the model by position).
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path

from trainer.errors import DataError

# fastai maps unknown words to xxunk, pads with xxpad and starts every text with xxbos:
# a vocabulary without them was not made for a fastai language model.
REQUIRED_SPECIALS = ("xxunk", "xxpad", "xxbos")
# the other special tokens fastai's rules emit: their absence weakens transfer, it is not an error
OTHER_SPECIALS = ("xxeos", "xxfld", "xxrep", "xxwrep", "xxup", "xxmaj")
PAD_ENTRY = "xxfake"  # fastai pads a vocabulary to a multiple of 8 with repeats of this
ENCODER, ENCODER_DP, DECODER_W, DECODER_B = (
    "0.encoder.weight",
    "0.encoder_dp.emb.weight",
    "1.decoder.weight",
    "1.decoder.bias",
)
RNN_KEY = re.compile(r"^0\.rnns\.(\d+)\.(.+)$")
RNN_PARTS = ("weight_hh_l0_raw", "module.weight_ih_l0", "module.bias_ih_l0", "module.bias_hh_l0")
HINT = (
    "pass fastai AWD-LSTM language-model weights (get_language_model / learn.save) "
    "and the vocabulary they were trained with"
)


class _VocabUnpickler(pickle.Unpickler):
    """Builds lists, strings and numbers only: any class or function in the pickle is refused."""

    def find_class(self, module: str, name: str):
        raise DataError(
            f"the vocabulary pickle refers to {module}.{name}; only a plain list of str is accepted",
            hint="save it as a plain list: pickle.dump(list(vocab), open('vocab.pkl', 'wb'))",
        )


def load_vocab(raw: bytes, source: str) -> list[str]:
    """The token list in `raw` (a pickled list of str), checked; DataError otherwise."""
    try:
        vocab = _VocabUnpickler(io.BytesIO(raw)).load()
    except DataError as exc:
        raise DataError(f"{source}: {exc.message}", hint=exc.hint) from exc
    except Exception as exc:  # a truncated or non-pickle file
        raise DataError(f"{source} is not a readable pickle ({type(exc).__name__}: {exc})", hint=HINT) from exc
    if not isinstance(vocab, list) or not all(isinstance(tok, str) for tok in vocab):
        kind = type(vocab).__name__ if not isinstance(vocab, list) else "a list with non-str entries"
        raise DataError(f"{source} holds {kind}, not a list of str (the tokens, in id order)", hint=HINT)
    seen: set[str] = set()
    dupes: set[str] = set()
    for tok in vocab:
        if tok in seen and tok != PAD_ENTRY:
            dupes.add(tok)
        seen.add(tok)
    if dupes:
        shown = sorted(dupes)[:5]
        raise DataError(
            f"{source} has duplicate tokens: {', '.join(map(repr, shown))}"
            + (f" and {len(dupes) - 5} more" if len(dupes) > 5 else ""),
            hint="each token must appear once; its position is its row in the weights",
        )
    missing = [tok for tok in REQUIRED_SPECIALS if tok not in seen]
    if missing:
        raise DataError(
            f"{source} lacks fastai's special tokens {', '.join(missing)}",
            hint="a fastai vocabulary starts with xxunk, xxpad, xxbos, ...; is this a fastai ULMFiT vocabulary?",
        )
    return vocab


def load_state_dict(path: Path) -> dict:
    """The tensors of a fastai LM weights file (a state dict, or `{"model": state dict, ...}`)."""
    import torch

    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # not a torch file, or one holding arbitrary objects
        raise DataError(
            f"{path} is not a torch state dict loadable with weights_only=True "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
            hint=HINT,
        ) from exc
    if isinstance(data, dict) and "model" in data and isinstance(data["model"], dict):
        data = data["model"]  # learn.save(..., with_opt=True) writes {"model": ..., "opt": ...}
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise DataError(f"{path} does not hold a state dict of tensors", hint=HINT)
    return dict(data)


def _shape(wgts: dict, key: str) -> tuple:
    return tuple(wgts[key].shape)


def _cleaned(wgts: dict, source: str) -> dict:
    """A copy of `wgts` without what older fastai versions add; refused if it is fastai 0.7's format."""
    wgts = dict(wgts)
    if "0.encoder_with_dropout.embed.weight" in wgts:
        raise DataError(
            f"{source} is in fastai 0.7's format (0.encoder_with_dropout.*), whose vocabulary and "
            "tokenization (_unk_, t_up, ...) differ from fastai v1/v2's",
            hint="use weights saved by fastai v1 or v2 (e.g. fastai's WT103 lstm_fwd.pth + itos_wt103.pkl)",
        )
    # older fastai files also carry each LSTM's `module.weight_hh_l0` next to the `_raw` one
    # WeightDropout keeps; fastai's own clean_raw_keys drops it the same way
    for key in [k for k in wgts if k.endswith(".module.weight_hh_l0")]:
        if key.replace(".module.weight_hh_l0", ".weight_hh_l0_raw") in wgts:
            del wgts[key]
    if ENCODER_DP not in wgts and ENCODER in wgts:
        wgts[ENCODER_DP] = wgts[ENCODER]  # the same tensor in fastai (EmbeddingDropout wraps the encoder)
    return wgts


def _n_layers(wgts: dict, source: str) -> int:
    """How many LSTM layers `wgts` has; refused without the embedding, the decoder or any layer."""
    missing = [k for k in (ENCODER, DECODER_W, DECODER_B) if k not in wgts]
    layers = sorted({int(m.group(1)) for k in wgts if (m := RNN_KEY.match(k))})
    if missing or not layers:
        raise DataError(
            f"{source} is not a fastai AWD-LSTM language model: missing "
            f"{', '.join(missing) if missing else '0.rnns.* (the LSTM layers)'}",
            hint=HINT,
        )
    return len(layers)


def _expected_keys(n_layers: int) -> list[str]:
    """The keys of fastai's AWD-LSTM language model with `n_layers` layers, in its order."""
    return [ENCODER, ENCODER_DP, *(f"0.rnns.{i}.{p}" for i in range(n_layers) for p in RNN_PARTS), DECODER_W, DECODER_B]


def _check_keys(wgts: dict, expected: list[str], n_layers: int, source: str) -> None:
    """Refused unless `wgts` has exactly the `expected` keys."""
    unexpected = sorted(set(wgts) - set(expected))
    absent = [k for k in expected if k not in wgts]
    if not (unexpected or absent):
        return
    details = "; ".join(
        part
        for part in (
            f"unexpected keys {', '.join(unexpected[:6])}" + (" ..." if len(unexpected) > 6 else "")
            if unexpected
            else "",
            f"missing keys {', '.join(absent[:6])}" + (" ..." if len(absent) > 6 else "") if absent else "",
        )
        if part
    )
    raise DataError(
        f"{source} does not have the keys of a unidirectional fastai AWD-LSTM language model "
        f"with {n_layers} layer(s): {details}",
        hint=HINT,
    )


def _arch(wgts: dict, n_layers: int, source: str) -> dict:
    """emb_sz, n_hid and n_layers, read off the embedding and the LSTM weights (which must be matrices)."""
    if wgts[ENCODER].dim() != 2 or any(wgts[f"0.rnns.{i}.weight_hh_l0_raw"].dim() != 2 for i in range(n_layers)):
        raise DataError(f"{source}: the embedding and the LSTM weights must be matrices", hint=HINT)
    emb_sz = _shape(wgts, ENCODER)[1]
    # with one layer n_hid shapes nothing (that layer maps emb_sz to emb_sz): recorded as emb_sz
    n_hid = _shape(wgts, "0.rnns.0.weight_hh_l0_raw")[1] if n_layers > 1 else emb_sz
    return {"emb_sz": emb_sz, "n_hid": n_hid, "n_layers": n_layers}


def _wanted_shapes(vocab_size: int, arch: dict) -> dict[str, tuple]:
    """Each key's shape in an AWD-LSTM language model of `arch` over `vocab_size` tokens."""
    emb_sz, n_hid, n_layers = arch["emb_sz"], arch["n_hid"], arch["n_layers"]
    want = {
        ENCODER: (vocab_size, emb_sz),
        ENCODER_DP: (vocab_size, emb_sz),
        DECODER_W: (vocab_size, emb_sz),
        DECODER_B: (vocab_size,),
    }
    for i in range(n_layers):
        n_in, n_out = (emb_sz if i == 0 else n_hid), (emb_sz if i == n_layers - 1 else n_hid)
        gates = 4 * n_out  # an LSTM stacks its four gates' weights
        want.update(
            {
                f"0.rnns.{i}.weight_hh_l0_raw": (gates, n_out),
                f"0.rnns.{i}.module.weight_ih_l0": (gates, n_in),
                f"0.rnns.{i}.module.bias_ih_l0": (gates,),
                f"0.rnns.{i}.module.bias_hh_l0": (gates,),
            }
        )
    return want


def _check_shapes(wgts: dict, vocab_size: int, arch: dict, source: str) -> None:
    """Refused unless the embedding has a row per token and every tensor has the shape `arch` gives it."""
    rows = _shape(wgts, ENCODER)[0]
    if rows != vocab_size:
        raise DataError(
            f"{source}: the embedding has {rows:,} rows but the vocabulary has {vocab_size:,} tokens",
            hint="pass the vocabulary these weights were trained with (one token per embedding row)",
        )
    wrong = [
        f"{k} is {list(_shape(wgts, k))}, expected {list(shape)}"
        for k, shape in _wanted_shapes(vocab_size, arch).items()
        if _shape(wgts, k) != shape
    ]
    if wrong:
        raise DataError(
            f"{source}: tensor shapes do not fit an AWD-LSTM with vocabulary {vocab_size:,} and arch {arch}: "
            + "; ".join(wrong[:4])
            + (" ..." if len(wrong) > 4 else ""),
            hint=HINT,
        )


def normalise(wgts: dict, vocab_size: int, source: str) -> tuple[dict, dict]:
    """(the state dict in the keys and order of fastai's AWD-LSTM language model, the arch)."""
    wgts = _cleaned(wgts, source)
    n_layers = _n_layers(wgts, source)
    expected = _expected_keys(n_layers)
    _check_keys(wgts, expected, n_layers, source)
    arch = _arch(wgts, n_layers, source)
    _check_shapes(wgts, vocab_size, arch, source)
    if not all(wgts[k].is_floating_point() for k in expected):
        raise DataError(f"{source}: some weights are not floating-point tensors", hint=HINT)
    return {k: wgts[k].float().contiguous() for k in expected}, arch


def checked_backward(
    backward: Path | None, backward_vocab: Path | None, tokens: list[str], vocab: Path, arch: dict
) -> dict | None:
    """The backward LM's state dict (None: none given), refused unless it fits the forward pair: the same
    vocabulary (when given as its own file) and the same arch."""
    if backward_vocab is not None:  # the backward LM's own vocabulary file: one vocab.pkl serves both
        if backward is None:
            raise DataError("--backward-vocab without --backward", hint="pass the backward weights too")
        if not Path(backward_vocab).is_file():
            raise DataError(f"{backward_vocab} does not exist or is not a file", hint=HINT)
        if load_vocab(Path(backward_vocab).read_bytes(), str(backward_vocab)) != tokens:
            raise DataError(
                f"{backward_vocab}: the backward LM's vocabulary differs from {vocab} (same tokens, "
                "same order needed: its embedding rows would be matched to the wrong words)",
                hint="import the backward LM with the vocabulary it shares with the forward one",
            )
    if backward is None:
        return None
    state_bwd, arch_bwd = normalise(load_state_dict(Path(backward)), len(tokens), str(backward))
    if arch_bwd != arch:
        raise DataError(
            f"{backward}: the backward LM's arch {arch_bwd} differs from the forward one's {arch}",
            hint="pass the backward weights trained with the same vocabulary and arch "
            "(e.g. fastai's WT103 lstm_bwd.pth beside lstm_fwd.pth)",
        )
    return state_bwd

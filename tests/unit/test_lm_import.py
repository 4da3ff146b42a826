"""`trainctl lm import | list | use`: a fastai-format pair made here (tiny arch) is published; misfits are refused."""

from __future__ import annotations

import json
import pickle
from pathlib import Path, PurePosixPath

import pytest
from typer.testing import CliRunner

from stacks.cli.main import app
from tests.support.project import SAMPLE

runner = CliRunner()
TINY_ARCH = {"emb_sz": 16, "n_hid": 32, "n_layers": 2}
WORDS = ["de", "la", "le", "mon", "ma", "je", "facture", "compte", "colis", "livraison", "bonjour", "commande", ","]


def bucket_dir(project) -> Path:
    return project / ".trainstack" / "local" / "bucket"


def special_tokens() -> list[str]:
    from fastai.text.core import defaults

    return list(defaults.text_spec_tok)


def language_model(vocab_size: int, arch: dict):
    import torch
    from fastai.text.models.awdlstm import AWD_LSTM, awd_lstm_lm_config
    from fastai.text.models.core import get_language_model

    torch.manual_seed(0)
    return get_language_model(AWD_LSTM, vocab_size, config={**awd_lstm_lm_config, **arch})


def write_pair(
    folder: Path, vocab: list[str], arch: dict = TINY_ARCH, *, learn_save: bool = False, vocab_obj=None
) -> tuple[Path, Path]:
    """weights.pth (a fastai LM state dict; `learn_save`: wrapped as learn.save writes it) + vocab.pkl."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    state = language_model(len(vocab), arch).state_dict()
    weights, vocab_path = folder / "lstm_fwd.pth", folder / "itos.pkl"
    torch.save({"model": state, "opt": {}} if learn_save else state, weights)
    vocab_path.write_bytes(pickle.dumps(vocab if vocab_obj is None else vocab_obj))
    return weights, vocab_path


@pytest.fixture
def vocab() -> list[str]:
    return special_tokens() + WORDS


def stage_train(project) -> None:
    dest = bucket_dir(project) / "fr" / "data" / "train.csv"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes((SAMPLE / "fr" / "train.csv").read_bytes())


def published_ids(project, lang: str = "fr") -> list[str]:
    return sorted(p.parent.name for p in (bucket_dir(project) / lang / "lm").glob("imp-*/meta.json"))


def current(project, lang: str = "fr") -> str:
    return json.loads((bucket_dir(project) / lang / "lm" / "CURRENT").read_text())["id"]


def test_import_publishes_infers_arch_reports_coverage(project, tmp_path, vocab):
    import torch

    stage_train(project)
    weights, vocab_path = write_pair(tmp_path / "pair", vocab)
    r = runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path), "--note", "test pair"])
    assert r.exit_code == 0, r.output
    [lm_id] = published_ids(project)
    assert lm_id.startswith("imp-") and len(lm_id) == len("imp-") + 12
    folder = bucket_dir(project) / "fr" / "lm" / lm_id
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "vocab.pkl", "weights.pth"]
    assert current(project) == lm_id
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["source"] == "import" and meta["arch"] == TINY_ARCH and meta["vocab_size"] == len(vocab)
    assert meta["tokens"] is None and meta["tokenizer"].startswith("fastai-spacy-blank-fr")
    origin = meta["origin"]
    assert origin["weights"] == "lstm_fwd.pth" and origin["vocab"] == "itos.pkl" and origin["note"] == "test pair"
    assert len(origin["weights_sha256"]) == 64 and len(origin["vocab_sha256"]) == 64
    coverage = origin["coverage"]
    assert coverage["train_tokens"] > 1000 and 0 < coverage["known_tokens"] < coverage["train_tokens"]
    assert 0 < coverage["token_share"] < 1 and 0 < coverage["distinct_share"] < coverage["token_share"]
    assert lm_id in r.output and "emb_sz=16 n_hid=32 n_layers=2" in r.output
    assert "of the" in r.output and "training tokens" in r.output and "CURRENT now points at" in r.output
    # what is published loads strictly into fastai's model, and is the vocabulary given
    model = language_model(len(vocab), TINY_ARCH)
    published = torch.load(folder / "weights.pth", weights_only=True)
    model.load_state_dict(published)
    assert list(published) == list(model.state_dict())  # fastai's load_pretrained matches keys by position
    assert pickle.loads((folder / "vocab.pkl").read_bytes()) == vocab
    # the same pair again: same id, nothing rewritten
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    r = runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)])
    assert r.exit_code == 0, r.output
    assert "already published" in r.output and published_ids(project) == [lm_id]
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    # ... but not under another tokenizer: the id is the files', and a base LM has one tokenizer
    sp_model = tmp_path / "spm.model"
    sp_model.write_bytes(b"not used: refused before tokenizing")
    r = runner.invoke(
        app,
        [
            "lm",
            "import",
            "fr",
            str(weights),
            str(vocab_path),
            "--tokenizer",
            "sentencepiece",
            "--sp-model",
            str(sp_model),
        ],
    )
    assert r.exit_code == 2 and f"already published as {lm_id} with tokenizer fastai-spacy" in r.output
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_import_with_a_backward_lm_publishes_both_and_refuses_another_arch(project, tmp_path, vocab):
    import torch

    weights, vocab_path = write_pair(tmp_path / "pair", vocab)
    torch.manual_seed(1)
    backward = tmp_path / "pair" / "lstm_bwd.pth"
    torch.save(language_model(len(vocab), TINY_ARCH).state_dict(), backward)
    other_arch = tmp_path / "pair" / "other_bwd.pth"
    torch.save(language_model(len(vocab), {**TINY_ARCH, "n_layers": 1}).state_dict(), other_arch)
    r = runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path), "--backward", str(other_arch)])
    assert_refused(project, r, "the backward LM's arch", "differs from the forward one's")

    shuffled = tmp_path / "pair" / "itos_bwd.pkl"
    shuffled.write_bytes(pickle.dumps(vocab[1:] + vocab[:1]))  # same size, another order
    r = runner.invoke(
        app,
        [
            "lm",
            "import",
            "fr",
            str(weights),
            str(vocab_path),
            "--backward",
            str(backward),
            "--backward-vocab",
            str(shuffled),
        ],
    )
    assert_refused(project, r, "the backward LM's vocabulary differs")

    same = tmp_path / "pair" / "itos_bwd_same.pkl"
    same.write_bytes(pickle.dumps(list(vocab)))
    r = runner.invoke(
        app,
        [
            "lm",
            "import",
            "fr",
            str(weights),
            str(vocab_path),
            "--backward",
            str(backward),
            "--backward-vocab",
            str(same),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "with a backward LM" in r.output
    [with_bwd] = published_ids(project)
    folder = bucket_dir(project) / "fr" / "lm" / with_bwd
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["backward"] is True and meta["origin"]["backward"] == "lstm_bwd.pth"
    model = language_model(len(vocab), TINY_ARCH)
    model.load_state_dict(torch.load(folder / "weights_bwd.pth", weights_only=True))
    # the forward pair alone is another base LM (another id): a run asking for it gets no backward LM
    r = runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)])
    assert r.exit_code == 0, r.output
    assert len(published_ids(project)) == 2 and current(project) != with_bwd


def test_old_fastai_file_with_extra_lstm_copies_is_normalised(project, tmp_path, vocab):
    """fastai v1 files (WT103's) also hold `module.weight_hh_l0` beside `weight_hh_l0_raw`, in another order."""
    import torch

    weights, vocab_path = write_pair(tmp_path / "pair", vocab)
    state = torch.load(weights, weights_only=True)
    for i in range(TINY_ARCH["n_layers"]):
        state[f"0.rnns.{i}.module.weight_hh_l0"] = state[f"0.rnns.{i}.weight_hh_l0_raw"].clone()
    del state["0.encoder_dp.emb.weight"]
    torch.save(dict(reversed(list(state.items()))), weights)
    r = runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)])
    assert r.exit_code == 0, r.output
    [lm_id] = published_ids(project)
    published = torch.load(bucket_dir(project) / "fr" / "lm" / lm_id / "weights.pth", weights_only=True)
    model = language_model(len(vocab), TINY_ARCH)
    assert list(published) == list(model.state_dict())
    model.load_state_dict(published)
    assert torch.equal(published["0.encoder_dp.emb.weight"], state["0.encoder.weight"])


def test_import_without_training_data_skips_coverage(project, tmp_path, vocab):
    weights, vocab_path = write_pair(tmp_path / "pair", vocab)
    r = runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)])
    assert r.exit_code == 0, r.output
    assert "coverage not measured" in r.output and len(published_ids(project)) == 1


def assert_refused(project, r, *messages: str) -> None:
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    for message in messages:
        assert message in r.output, r.output
    assert not (bucket_dir(project) / "fr" / "lm").exists(), "something was published"


def test_vocab_shorter_than_weights_is_refused(project, tmp_path, vocab):
    stage_train(project)
    weights, vocab_path = write_pair(tmp_path / "pair", vocab)
    vocab_path.write_bytes(pickle.dumps(vocab[:-1]))
    r = runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)])
    assert_refused(project, r, f"the embedding has {len(vocab)} rows but the vocabulary has {len(vocab) - 1} tokens")


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"xxunk": 0, "xxpad": 1}, "holds dict, not a list of str"),
        (PurePosixPath("vocab"), "refers to pathlib"),
        ("a string", "holds str, not a list of str"),
    ],
)
def test_vocab_that_is_not_a_list_of_str_is_refused(project, tmp_path, vocab, bad, message):
    weights, vocab_path = write_pair(tmp_path / "pair", vocab, vocab_obj=bad)
    r = runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)])
    assert_refused(project, r, message)


def test_vocab_with_duplicates_or_without_specials_is_refused(project, tmp_path, vocab):
    weights, vocab_path = write_pair(tmp_path / "pair", vocab, vocab_obj=vocab[:-1] + ["facture"])
    assert_refused(
        project,
        runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)]),
        "duplicate tokens: 'facture'",
    )
    plain = [f"w{i}" for i in range(len(vocab))]
    weights, vocab_path = write_pair(tmp_path / "plain", plain)
    assert_refused(
        project,
        runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)]),
        "lacks fastai's special tokens xxunk, xxpad, xxbos",
    )


def test_weights_that_are_not_a_language_model_are_refused(project, tmp_path, vocab):
    import torch

    weights, vocab_path = write_pair(tmp_path / "pair", vocab)
    state = torch.load(weights, weights_only=True)
    del state["1.decoder.bias"]
    torch.save(state, weights)
    assert_refused(
        project, runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)]), "missing 1.decoder.bias"
    )
    state = language_model(len(vocab), TINY_ARCH).state_dict()
    state["0.rnns.1.module.weight_ih_l0"] = torch.zeros(64, 31)
    torch.save(state, weights)
    assert_refused(
        project,
        runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)]),
        "0.rnns.1.module.weight_ih_l0 is [64, 31], expected [64, 32]",
    )
    state = language_model(len(vocab), TINY_ARCH).state_dict()
    state["0.encoder_with_dropout.embed.weight"] = state.pop("0.encoder_dp.emb.weight")
    torch.save(state, weights)
    assert_refused(
        project, runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)]), "fastai 0.7's format"
    )
    weights.write_bytes(b"not a torch file")
    assert_refused(
        project, runner.invoke(app, ["lm", "import", "fr", str(weights), str(vocab_path)]), "is not a torch state dict"
    )


def test_list_and_use(project, tmp_path, vocab):
    first = write_pair(tmp_path / "one", vocab)
    # learn.save's {"model": ..., "opt": ...} with one layer and a longer vocabulary
    second = write_pair(
        tmp_path / "two", vocab + ["client"], {"emb_sz": 8, "n_hid": 24, "n_layers": 1}, learn_save=True
    )
    assert runner.invoke(app, ["lm", "import", "fr", *map(str, first)]).exit_code == 0
    r = runner.invoke(app, ["lm", "import", "fr", *map(str, second)])
    assert r.exit_code == 0, r.output
    ids = published_ids(project)
    assert len(ids) == 2
    second_id = current(project)
    first_id = next(i for i in ids if i != second_id)
    meta = json.loads((bucket_dir(project) / "fr" / "lm" / second_id / "meta.json").read_text())
    assert meta["arch"] == {"emb_sz": 8, "n_hid": 8, "n_layers": 1}  # one layer: n_hid shapes nothing

    r = runner.invoke(app, ["lm", "list", "fr"])
    assert r.exit_code == 0, r.output
    rows = [line.split("\t") for line in r.output.splitlines() if "\timp-" in line]
    assert {row[1]: row[0] for row in rows} == {first_id: "", second_id: "*"}
    assert all(row[2] == "import" and row[3] == "?" for row in rows)

    r = runner.invoke(app, ["lm", "use", "fr", first_id])
    assert r.exit_code == 0, r.output
    assert current(project) == first_id
    listed = json.loads(runner.invoke(app, ["lm", "list", "fr", "--json"]).output)
    assert {lm["id"]: lm["current"] for lm in listed} == {first_id: True, second_id: False}
    assert all(lm["small"] is False and lm["source"] == "import" for lm in listed)

    r = runner.invoke(app, ["lm", "use", "fr", "imp-nope"])
    assert r.exit_code == 2 and "no base LM 'imp-nope' for fr" in r.output
    assert first_id in r.output and second_id in r.output
    assert current(project) == first_id


def test_list_marks_small_lms_and_empty_language(project):
    from trainer.lm import store
    from trainer.storage import LocalBucket

    r = runner.invoke(app, ["lm", "list", "fr"])
    assert r.exit_code == 0 and "no base LM published for fr" in r.output
    bucket = LocalBucket(bucket_dir(project))
    small = store.BaseLM(
        id="pre-small",
        source="pretrain",
        tokenizer="t",
        arch=dict(TINY_ARCH),
        vocab_size=8,
        tokens=5_000,
        perplexity=120.5,
        created_at="2026-01-01T00:00:00Z",
    )
    store.publish(bucket, "fr", small, b"w", b"v", make_current=True)
    r = runner.invoke(app, ["lm", "list", "fr"])
    row = next(line.split("\t") for line in r.output.splitlines() if "\tpre-small\t" in line)
    assert row[0] == "*" and row[3] == "5,000" and row[4] == "120.5" and "expect weak transfer" in row[-1]
    assert row[5] == f"{TINY_ARCH['emb_sz']}/{TINY_ARCH['n_hid']}/{TINY_ARCH['n_layers']} · 8 words"
    assert row[7].endswith(" d")  # made on 2026-01-01: days ago


def test_a_base_lm_says_its_age():
    from trainer.lm.store import BaseLM

    lm = BaseLM(id="x", source="pretrain", tokenizer="t", arch={}, vocab_size=1, created_at="2026-01-01T00:00:00Z")
    made = 1767225600  # 2026-01-01T00:00:00Z
    assert [lm.age(made + s) for s in (30, 5400, 3 * 86400)] == ["0 min", "2 h", "3 d"]
    assert BaseLM(id="x", source="legacy", tokenizer="t", arch={}, vocab_size=1).age() == ""


def test_unknown_language_and_missing_trainer_extra(project, tmp_path, monkeypatch, vocab):
    r = runner.invoke(app, ["lm", "list", "de"])
    assert r.exit_code == 2 and "language 'de' is not configured" in r.output
    import stacks.cli.lm_cmd as lm_cmd

    real = lm_cmd.importlib.util.find_spec
    monkeypatch.setattr(
        lm_cmd.importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    r = runner.invoke(app, ["lm", "import", "fr", "w.pth", "v.pkl"])
    assert r.exit_code == 2 and "pip install 'trainstack[trainer]'" in r.output


def test_one_damaged_base_lm_is_a_line_and_the_others_are_listed(project):
    from trainer.lm import store
    from trainer.storage import LocalBucket

    bucket = LocalBucket(bucket_dir(project))
    for lm_id in ("pre-good", "pre-cut"):
        lm = store.BaseLM(
            id=lm_id,
            source="pretrain",
            tokenizer="t",
            arch=dict(TINY_ARCH),
            vocab_size=8,
            tokens=500_000,
            perplexity=80.0,
            created_at="2026-01-01T00:00:00Z",
        )
        store.publish(bucket, "fr", lm, b"w", b"v", make_current=lm_id == "pre-good")
    meta = bucket_dir(project) / "fr" / "lm" / "pre-cut" / "meta.json"
    meta.write_text(meta.read_text()[:25])  # cut short, as by a full disk
    r = runner.invoke(app, ["lm", "list", "fr"])
    assert r.exit_code == 0, r.output
    assert "UNREADABLE pre-cut" in r.output and "meta.json" in r.output and "\tpre-good\t" in r.output
    listed = json.loads(runner.invoke(app, ["lm", "list", "fr", "--json"]).output)
    assert {lm["id"] for lm in listed} == {"pre-good", "pre-cut"}
    assert "not valid JSON" in next(lm for lm in listed if lm["id"] == "pre-cut")["unreadable"]

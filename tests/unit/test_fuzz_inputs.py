"""Fuzzed input for the data readers and `trainctl data push`: whatever the bytes, a clean result or one
DataError (exit 2, the bucket as it was), never a traceback, and never a row lost without a count.

Bounded and derandomized (the same examples every run), so CI is deterministic and the file stays fast."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import shutil

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from stacks.cli.main import app
from tests.support.project import SAMPLE
from tests.unit.test_run_ids import COMMANDS
from trainer.data.labelled import LabelledData, parse_labelled
from trainer.data.textfiles import check_text_file, unlabelled_texts
from trainer.errors import DataError

OPTS = dict(text_col="text", label_col="labels", label_sep=";")
FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Texts and labels chosen to hit the readers' edges: separators, quotes, line ends, NULs, blanks.
ODD = [
    "a, b",
    'il a dit "oui"',
    '"',
    "deux\nlignes",
    "cr\rseul",
    "  ",
    "",
    "x\x00y",
    "\ufeffbom",
    "é à ç",
    "a\tb",
    "a;b",
    "\u2028",
    '["a"]',
]
TEXT = st.one_of(st.text(max_size=15), st.sampled_from(ODD))
LABEL = st.sampled_from(["a", "b", "c", "a;b", "", " ", '["a", "b"]', "d\x00"])
# two usable rows of two labels first, so that most examples get past "a single label" to the rest
ROWS = st.lists(st.tuples(TEXT, LABEL), max_size=12).map(lambda rows: [("un", "a"), ("deux", "b"), *rows])
JUNK = [b'"', b",", b";", b"\t", b"\x00", b"\xff", b"\xe9", b"\r", b"\n", b'""', b"\xc3", b"{", b"}"]


def csv_bytes(rows: list[tuple[str, str]], newline: str = "\n") -> bytes:
    out = io.StringIO()
    # csv.writer quotes a field with a line end only when the end is in its lineterminator: a bare \r
    # written unquoted ends the line for every reader (this one too), so "\n" files quote every field
    quoting = csv.QUOTE_ALL if newline == "\n" else csv.QUOTE_MINIMAL
    writer = csv.writer(out, lineterminator=newline, quoting=quoting)
    writer.writerow(["text", "labels"])
    writer.writerows(rows)
    return out.getvalue().encode()


def jsonl_bytes(rows: list[tuple[str, str]]) -> bytes:
    return "".join(json.dumps({"text": t, "labels": lbl}) + "\n" for t, lbl in rows).encode()


@st.composite
def damaged(draw, raw: bytes) -> bytes:
    """`raw` after up to three edits: cut short, junk inserted, commas swapped for another separator, or the
    whole file in another encoding."""
    for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3]))):  # a third of the files left whole
        edit = draw(st.sampled_from(["cut", "insert", "separator", "encoding"]))
        at = draw(st.integers(0, len(raw)))
        if edit == "cut":
            raw = raw[:at]
        elif edit == "insert":
            raw = raw[:at] + draw(st.sampled_from(JUNK)) + raw[at:]
        elif edit == "separator":
            raw = raw[:at] + raw[at:].replace(b",", draw(st.sampled_from([b";", b"\t", b"|"])))
        else:
            codec = draw(st.sampled_from(["utf-16", "latin-1", "cp1252", "utf-8-sig"]))
            raw = raw.decode("utf-8", errors="replace").encode(codec, errors="replace")
    return raw


def any_csv():
    written = st.builds(csv_bytes, ROWS, st.sampled_from(["\n", "\r\n"])).flatmap(damaged)
    return st.one_of(st.binary(max_size=120), written, written)


def parse_or_error(raw: bytes, fmt: str) -> LabelledData | None:
    """The data, or None after a DataError with a message and a hint; any other exception fails the test."""
    try:
        data = parse_labelled(raw, source=f"train.{fmt}", fmt=fmt, **OPTS)
    except DataError as exc:
        assert exc.message and exc.hint, f"an error without a message or a hint: {exc!r}"
        event("refused")  # --hypothesis-show-statistics: how many examples reach each side
        return None
    event("read")
    return data


def assert_every_row_counted(data: LabelledData, records: int) -> None:
    skipped = sum(map(len, data.skipped.values()))
    assert data.total_rows == records, f"{records} records in the file, {data.total_rows} read"
    assert len(data.texts) + skipped == records, f"kept {len(data.texts)} + skipped {skipped} != {records}"
    assert data.skipped_empty == skipped


def csv_records(raw: bytes) -> int:
    """Records of a CSV that reads (the header excluded; a line of spaces only is no record)."""
    rows = csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline=""), strict=True)
    return sum(1 for row in rows if len(row) > 1 or "".join(row).strip()) - 1


# -- the readers ---------------------------------------------------------------------------------------------


@FUZZ
@given(rows=ROWS, newline=st.sampled_from(["\n", "\r\n"]))
def test_a_well_formed_csv_is_read_whole_whatever_its_texts(rows, newline):
    """Every quoting csv.writer does (commas, quotes, line ends inside texts) reads back: nothing is refused
    but what the rules refuse, and every row is kept or counted."""
    try:
        data = parse_labelled(csv_bytes(rows, newline), source="train.csv", fmt="csv", **OPTS)
    except DataError as exc:
        assert re.search(r"NUL|single label|no usable rows|not a label", exc.message), exc.message
        return
    assert_every_row_counted(data, len(rows))
    kept = [t.strip() for t, _ in rows if t.strip()]
    assert set(data.texts) <= set(kept)


@FUZZ
@given(raw=any_csv())
def test_any_bytes_as_csv_read_or_fail_with_one_clear_error(raw):
    data = parse_or_error(raw, "csv")
    if data is not None:
        assert_every_row_counted(data, csv_records(raw))


@FUZZ
@given(raw=st.one_of(st.binary(max_size=120), *[st.builds(jsonl_bytes, ROWS).flatmap(damaged)] * 2))
def test_any_bytes_as_json_lines_read_or_fail_with_one_clear_error(raw):
    data = parse_or_error(raw, "jsonl")
    if data is not None:
        records = sum(1 for line in raw.decode("utf-8-sig").split("\n") if line.strip())
        assert_every_row_counted(data, records)


def parquet_bytes(rows: list[tuple[str, str]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"text": [t for t, _ in rows], "labels": [lbl for _, lbl in rows]}), buf)
    return buf.getvalue()


@settings(FUZZ, max_examples=60)
@given(rows=ROWS, cut=st.none() | st.floats(0, 1), flip=st.none() | st.integers(0, 10_000), byte=st.integers(0, 255))
def test_a_damaged_parquet_file_reads_or_fails_with_one_clear_error(rows, cut, flip, byte):
    raw = bytearray(parquet_bytes(rows))
    if flip is not None:
        raw[flip % len(raw)] = byte
    raw = bytes(raw if cut is None else raw[: max(1, int(len(raw) * cut))])
    data = parse_or_error(raw, "parquet")
    if data is not None:
        assert_every_row_counted(data, data.total_rows)


TEXT_LINES = st.builds(lambda rows: "\n".join(t for t, _ in rows).encode(), ROWS).flatmap(damaged)
TEXT_FILES = st.one_of(st.binary(max_size=120), TEXT_LINES, TEXT_LINES)


@FUZZ
@given(raw=TEXT_FILES, zipped=st.booleans(), cut=st.integers(0, 200))
def test_a_corpus_check_accepts_exactly_what_the_reader_reads(raw, zipped, cut):
    """data push's streaming check and the trainer's reader agree on every file, gzipped, cut short or not."""
    name = "unlabelled.txt.gz" if zipped else "unlabelled.txt"
    if zipped:
        raw = gzip.compress(raw)
        raw = raw[: len(raw) - cut] if cut < len(raw) else raw
    try:
        check_text_file(io.BytesIO(raw), name, name)
        checked = None
    except DataError as exc:
        checked = exc
    try:
        unlabelled_texts(raw, name, text_col="text", source=name)
        read = None
    except DataError as exc:
        read = exc
    assert (checked is None) == (read is None), f"check: {checked and checked.message}; read: {read and read.message}"


# -- data push -----------------------------------------------------------------------------------------------

runner = CliRunner()


def bucket_files(project) -> dict[str, bytes]:
    root = project / ".trainstack" / "local" / "bucket"
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def skipped_in(output: str) -> tuple[int, int, int]:
    """(kept, of, skipped) from the summary line 'kept N of M rows: skipped 2 rows with ..., 1 with ...'."""
    match = re.search(r"kept (\d+) of (\d+) rows(?:: skipped (.*?)(?:;|$))?", output)
    assert match, f"no 'kept N of M rows' in {output!r}"
    skipped = sum(int(n) for n in re.findall(r"(\d+) (?:rows? )?with ", match.group(3) or ""))
    return int(match.group(1)), int(match.group(2)), skipped


@settings(FUZZ, max_examples=80)
@given(train=any_csv(), corpus=TEXT_FILES, corpus_as=st.sampled_from(["txt", "gzip", "plain as .gz"]))
def test_data_push_of_fuzzed_files_is_exit_0_or_2_and_exit_2_stages_nothing(
    project, tmp_path, train, corpus, corpus_as
):
    shutil.rmtree(project / ".trainstack", ignore_errors=True)
    (project / ".trainstack" / "local" / "bucket" / "fr" / "data").mkdir(parents=True)
    (project / ".trainstack/local/bucket/fr/data/test.csv").write_bytes(b"text,labels\nstaged before,a\n")
    folder = tmp_path / "push"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "corpus").mkdir(parents=True)
    (folder / "train.csv").write_bytes(train)
    name = "a.txt" if corpus_as == "txt" else "a.txt.gz"
    (folder / "corpus" / name).write_bytes(gzip.compress(corpus) if corpus_as == "gzip" else corpus)
    before = bucket_files(project)
    r = runner.invoke(app, ["data", "push", "fr", str(folder)], env={"COLUMNS": "400"})
    output = " ".join(r.output.split())
    assert r.exit_code in (0, 2), f"exit {r.exit_code}: {output}\n{r.exception!r}"
    event(f"exit {r.exit_code}")
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit))
    if r.exit_code == 2:
        assert bucket_files(project) == before, "a refused push changed the bucket"
        assert "error:" in output and "→" in output
        return
    kept, of, skipped = skipped_in(output)
    assert of == csv_records(train) and kept + skipped == of
    assert (project / ".trainstack/local/bucket/fr/data/train.csv").read_bytes() == train


def test_the_sample_data_pushes_cleanly_as_the_fuzzed_test_expects(project):
    r = runner.invoke(app, ["data", "push", "fr", str(SAMPLE / "fr")], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert skipped_in(" ".join(r.output.split())) == (380, 380, 0)


@pytest.mark.parametrize("raw", [b"text,labels\nx,a\ny,b\n\x00", b'text,labels\n"x,a\ny,b\n', b"\xff\xfe\x00\x00"])
def test_the_bucket_is_untouched_by_a_refused_push_of_a_known_bad_file(project, tmp_path, raw):
    (tmp_path / "train.csv").write_bytes(raw)
    r = runner.invoke(app, ["data", "push", "fr", str(tmp_path / "train.csv")])
    assert r.exit_code == 2 and bucket_files(project) == {}


# -- run ids, overlays and --set values ----------------------------------------------------------------------
# Whatever is typed, a command ends 0, 1 or 2 with one error line (or Click's own usage message), never a
# traceback or exit 3, and writes nothing but where it may: `promote` a language's models/, nothing for the rest.

FAILED_FR, SUCCEEDED_FR = "20260101-100000-dead", "20260102-100000-beef"
RUN_ID_PIECES = [FAILED_FR, SUCCEEDED_FR, "..", "/", "\\", "\x00", "\n", " ", "~", "*", "%2e%2e", "-", "é", "runs"]
RUN_IDS = st.one_of(
    st.text(max_size=20),
    st.lists(st.sampled_from(RUN_ID_PIECES), max_size=4).map("".join),
    st.from_regex(r"[A-Za-z0-9_-]{1,70}", fullmatch=True),
    st.sampled_from([f"../../fr/runs/{FAILED_FR}", f"/tmp/{FAILED_FR}", "2026" * 200, "--help", "-h"]),
)
# Every command that takes a run id as typed (test_run_ids checks its list is every such parameter), and fr's
# promote and runs show, which find runs there.
RUN_ID_COMMANDS = [*COMMANDS.values(), ["promote", "fr", "RUN"], ["runs", "show", "RUN", "--lang", "fr"]]


def project_files(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_ended_cleanly(r, args) -> None:
    said = f"{args!r} -> exit {r.exit_code}: {r.output}\n{r.exception!r}"
    assert r.exit_code in (0, 1, 2), said
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), said
    if r.exit_code:
        errors = re.findall(r"^error:", r.output, re.M)
        assert len(errors) == 1 or (not errors and "Usage:" in r.output and "Error" in r.output), said


def assert_wrote_only_where_it_may(before: dict, after: dict, allowed: str | None = None) -> None:
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert all(allowed and re.match(allowed, k) for k in changed), f"written: {sorted(changed)}"


@pytest.fixture
def runs_of_two_languages(project):
    from tests.support.runs import fake_run, write

    root = project / ".trainstack" / "local" / "bucket"
    fake_run(root, "fr", FAILED_FR, f1={"a": 0.5, "b": 0.5}, state="FAILED")
    write(root, f"fr/runs/{FAILED_FR}/log.txt", b"2026-01-01T10:00:00Z FAILED: out of memory\n")
    fake_run(root, "fr", SUCCEEDED_FR, f1={"a": 0.8, "b": 0.7}, rows=[(0, "x", "a", "a")])
    assert runner.invoke(app, ["data", "push", "en", str(SAMPLE / "fr")]).exit_code == 0
    return project


@settings(FUZZ, max_examples=60)
@given(command=st.sampled_from(RUN_ID_COMMANDS), run_id=RUN_IDS)
def test_any_run_id_given_to_any_command_ends_cleanly_and_writes_only_where_it_may(
    runs_of_two_languages, command, run_id
):
    project = runs_of_two_languages
    args = [run_id if arg == "RUN" else arg for arg in command]
    before = project_files(project)
    r = runner.invoke(app, args, env={"COLUMNS": "400"})
    event(f"{command[0]} exit {r.exit_code}")
    assert_ended_cleanly(r, args)
    # a promotion writes the language's models/ (fr's succeeded run is the only one it may promote)
    assert_wrote_only_where_it_may(before, project_files(project), r"\.trainstack/local/bucket/fr/models/")


CONFIG_PATHS = [
    "target",
    "bucket",
    "extends",
    "defaults",
    "defaults.trainer.seed",
    "defaults.trainer.bs",
    "defaults.trainer.lr",
    "defaults.trainer.nope",
    "defaults.data.text_col",
    "defaults.data.label_cols",
    "defaults.max_run_hours",
    "languages",
    "languages.fr",
    "languages.FR",
    "languages.../x",
    "languages.fr.trainer.n_hid",
    "tracking.mlflow.uri",
    "local.spot_market.speedup",
    "local.spot_market.zones",
    "local.spot_market.preemptions",
    "gcp.project",
    "",
    "a..b",
]
ODD_VALUES = [
    None,
    True,
    "",
    "yes",
    "null",
    "../out",
    "/abs",
    "x\x00",
    -1,
    0,
    2**64,
    1e309,
    float("nan"),
    [],
    {},
    ["a", None],
    {"a": None},
    {"sim-a": {"outages": [{"start_s": 9, "end_s": 1}]}},
    [{"zone": "", "stage": "x"}],
    "file://../out",
    "file://x",
    "gs://",
    "local",
    "local-spot",
    "fuzz",
    "base",
    "text",
    "http//h",
]
VALUES = st.one_of(st.sampled_from(ODD_VALUES), st.integers(), st.floats(), st.text(max_size=8))
SET_TEXT = st.sampled_from(
    ["", "null", "[", "{a: ", "1e999", ".nan", "yes", "~", "-1", "4097", "'x", "&a [*a]", "!!python/name:os.system"]
)
SETS = st.lists(
    st.one_of(
        st.builds(lambda k, v: f"{k}={v}", st.sampled_from(CONFIG_PATHS), st.one_of(SET_TEXT, st.text(max_size=8))),
        st.text(max_size=15),
    ),
    max_size=3,
)


def nested(pairs: list[tuple[str, object]]) -> dict:
    doc: dict = {}
    for path, value in pairs:
        *parents, leaf = path.split(".")
        at = doc
        for key in parents:
            at = at.setdefault(key, {}) if isinstance(at.get(key, {}), dict) else {}
        at[leaf] = value
    return doc


def yaml_text(doc: dict) -> str:
    import yaml

    return yaml.safe_dump(doc, allow_unicode=True)


OVERLAYS = st.one_of(
    st.lists(st.tuples(st.sampled_from(CONFIG_PATHS), VALUES), max_size=5).map(nested).map(yaml_text),
    st.sampled_from(
        ["{", "[", ": :", "extends: fuzz\n", "a: &x [*x]\n", "<<: *nope\n", "\t", "!!python/name:os.system"]
    ),
    st.text(max_size=40),
    st.binary(max_size=40),
)
READS = [["config", "show"], ["config", "show", "--json"], ["runs"], ["status", "fr"], ["logs", "fr"]]


@settings(FUZZ, max_examples=60)
@given(overlay=OVERLAYS, sets=SETS, command=st.sampled_from(READS))
def test_any_overlay_and_set_values_end_cleanly_and_write_nothing(project, overlay, sets, command):
    """An env file and --set values of any shape: exit 0 or 2 with one error naming where the value came from,
    and nothing written anywhere (a bucket named by the overlay included)."""
    from stacks.config import load_config
    from stacks.errors import TrainstackError

    env_file = project / "envs" / "fuzz.yaml"
    (env_file.write_bytes if isinstance(overlay, bytes) else env_file.write_text)(overlay)
    set_args = [arg for s in sets for arg in ("--set", s)]
    try:  # what reads a bucket reads the local target's folders alone here (a gs:// bucket would go to Google)
        if load_config(project / "envs", "fuzz", sets).target != "local":
            command = ["config", "show"]
    except (TrainstackError, ValueError, TypeError):
        pass
    args = [*command, "--env", "fuzz", *set_args]
    before = project_files(project.parent)
    r = runner.invoke(app, args, env={"COLUMNS": "400"})
    event(f"{command[0]} exit {r.exit_code}")
    assert_ended_cleanly(r, args)
    assert_wrote_only_where_it_may(before, project_files(project.parent))

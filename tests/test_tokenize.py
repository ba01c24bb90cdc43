"""jb.tokenize / `jaxbatch tokenize`: every input kind against the tokenizer's
own encode_batch (the demo's all-MiniLM-L6-v2 tokenizer), the options, bad
documents under each on_error, kill -9 at random moments then resume equal
to an uninterrupted run, the CLI, and the output read back by a Loader."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
import tokenizers
from hypothesis import given
from hypothesis import strategies as st
from kill_resume import cli, finish, kill_at_random_moments, shard_bytes

import jaxbatch as jb
from jaxbatch import _core
from jaxbatch._src.cli.demo.minilm import model_dir
from jaxbatch._src.cli.main import main as cli_main
from jaxbatch._src.data import text as text_module
from jaxbatch._src.data.default_data import pydoc_paragraphs
from jaxbatch._src.data.job_output import job_output_table
from jaxbatch._src.data.text import TextBatch, open_text
from jaxbatch._src.job import folder as job_folder
from jaxbatch._src.job.tokenize import pieces

TOKENIZER = model_dir() / "tokenizer.json"
# Small batches and shards, so that pieces, shards and source batches cross.
SMALL = dict(batch_size=37, checkpoint_every=100, progress=False)


class Crash(Exception):
    pass


def crash_on_shard(monkeypatch, number: int) -> None:
    """The job dies (as if killed) once shard `number` is written, before
    its record: what came before is committed."""
    real = job_folder.Journal.append

    def append(self, record):
        if record["kind"] == "shard" and record["shard"] == number:
            raise Crash
        real(self, record)

    monkeypatch.setattr(job_folder.Journal, "append", append)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """300 pydoc paragraphs and a few texts of other scripts."""
    return [*pydoc_paragraphs()[:300], "naïve café — 東京 🙂", "x" * 3000, "a\tb\nc"]


def reference(texts, *, max_length=None, add_special_tokens=True) -> list[np.ndarray]:
    """The tokenizer's own encode_batch, set up as jb.tokenize documents it."""
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER))
    tok.no_padding()
    if max_length is None:
        tok.no_truncation()
    else:
        tok.enable_truncation(max_length)
    encodings = tok.encode_batch(texts, add_special_tokens=add_special_tokens)
    return [np.array(e.ids) for e in encodings]


def assert_tokens(output: Path, expected: list[np.ndarray], documents=None) -> None:
    """The job's output holds `expected` as documents `documents` (default: all)."""
    out = jb.read_output(output)
    documents = np.arange(len(expected)) if documents is None else np.asarray(documents)
    np.testing.assert_array_equal(out["example_index"], documents)
    assert len(out["tokens"]) == len(expected)
    for got, want in zip(out["tokens"], expected, strict=True):
        np.testing.assert_array_equal(got, want)


# -- Every input kind --------------------------------------------------------


def write_source(kind: str, texts: list, path: Path):
    """`texts` as the source of kind `kind`, and the order its documents
    come in (a Hugging Face dataset's shuffle)."""
    table = pa.table({"id": np.arange(len(texts)), "text": pa.array(texts, pa.string())})
    if kind == "list":
        return texts, None
    if kind == "table":
        return pa.Table.from_batches(table.to_batches(max_chunksize=50)), None
    if kind == "parquet":
        pq.write_table(table, path.with_suffix(".parquet"), row_group_size=70)
        return path.with_suffix(".parquet"), None
    if kind == "arrow":
        feather.write_feather(table, path.with_suffix(".arrow"), chunksize=90)
        return path.with_suffix(".arrow"), None
    if kind == "jsonl":
        lines = [json.dumps({"id": i, "text": t}) for i, t in enumerate(texts)]
        path.with_suffix(".jsonl").write_text("\n".join(lines) + "\n")
        return path.with_suffix(".jsonl"), None
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": texts}).shuffle(seed=3)
    return ds, [texts.index(t) for t in ds["text"]]


@pytest.mark.parametrize("kind", ["list", "table", "parquet", "arrow", "jsonl", "huggingface"])
def test_every_input_kind_gives_the_tokenizers_own_ids(tmp_path, texts, kind):
    source, order = write_source(kind, texts, tmp_path / "corpus")
    report = jb.tokenize(source, tmp_path / "out", TOKENIZER, **SMALL)
    ordered = texts if order is None else [texts[i] for i in order]
    expected = reference(ordered)
    assert_tokens(tmp_path / "out", expected)
    assert report.complete and report.total == report.examples == len(texts)
    assert report.tokens == sum(map(len, expected)) and report.shards == 4
    assert report.dtype == "uint16"  # 30,522 tokens: the smallest type that holds them


def test_the_output_loads_in_place_and_packs_every_document_once(tmp_path, texts):
    jb.tokenize(texts, tmp_path / "out", TOKENIZER, max_length=256, truncation=True, **SMALL)
    expected = reference(texts, max_length=256)
    # Read in place: the Dataset's values are the Arrow buffers the shards decoded to.
    table = job_output_table(tmp_path / "out", "test")
    ds = jb.Dataset.from_arrow(table)
    chunk = table.column("tokens").chunks[1]
    first = chunk.offsets[0].as_py()
    values = chunk.values.buffers()[1].address + (chunk.values.offset + first) * 2
    example = ds.example(len(table.column("tokens").chunks[0]))["tokens"]
    assert example.__array_interface__["data"][0] == values
    # A Loader reads the folder as it reads a file; packed rows hold each document once.
    seen = {}
    with jb.Loader(tmp_path / "out", jb.Pack(row_length=512, rows_per_batch=4)) as loader:
        for batch in loader:
            tokens, segments = np.asarray(batch["tokens"]), np.asarray(batch["tokens_segment_ids"])
            for row, slots in enumerate(np.asarray(batch["example_index"])):
                for k, e in enumerate(slots):
                    if e >= 0:
                        assert int(e) not in seen
                        seen[int(e)] = tokens[row][segments[row] == k + 1]
    assert sorted(seen) == list(range(len(texts)))
    for e, ids in seen.items():
        np.testing.assert_array_equal(ids, expected[e])


@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    size=st.integers(1, 30),
    every=st.integers(1, 50),
    shard=st.integers(0, 3),
)
def test_pieces_cover_the_documents_and_never_cross_a_shard(sizes, size, every, shard):
    start = shard * every
    firsts = start + np.concatenate([[0], np.cumsum(sizes)])
    batches = [
        TextBatch(int(a), pa.array([str(i) for i in range(a, b)], pa.large_string()), {})
        for a, b in zip(firsts[:-1], firsts[1:], strict=True)
    ]
    got = list(pieces(iter(batches), size, every))
    texts = [t for p in got for t in p.texts.to_pylist()]
    assert texts == [str(i) for i in range(start, int(firsts[-1]))]
    for p in got:
        end = p.first + len(p)
        assert 0 < len(p) <= size
        assert p.first // every == (end - 1) // every  # Inside one shard.
        # Full, unless it ends its shard or the documents.
        assert len(p) == size or end % every == 0 or end == firsts[-1]


def test_text_in_memory_is_keyed_on_its_documents_whatever_their_chunks():
    texts = ["ab", "", None, "cd", "é"]
    as_list = open_text(texts, None, "t").fingerprint()
    chunked = pa.Table.from_batches(pa.table({"text": pa.array(texts)}).to_batches(max_chunksize=2))
    assert open_text(chunked, None, "t").fingerprint() == as_list
    for other in (["ab", "", "", "cd", "é"], ["a", "b", None, "cd", "é"], texts[:4]):
        assert open_text(other, None, "t").fingerprint() != as_list
    fingerprint = _core.TextFingerprint()
    with pytest.raises(ValueError, match="offsets"):  # The engine checks what it reads.
        fingerprint.add(np.array([0, 9]), np.zeros(3, np.uint8), np.ones(1, np.uint8))


# -- Options -----------------------------------------------------------------


def test_truncation_special_tokens_dtype_and_column(tmp_path, texts):
    jb.tokenize(texts, tmp_path / "cut", TOKENIZER, max_length=64, truncation=True, **SMALL)
    assert_tokens(tmp_path / "cut", reference(texts, max_length=64))
    report = jb.tokenize(
        texts,
        tmp_path / "plain",
        TOKENIZER,
        add_special_tokens=False,
        dtype="int32",
        token_column="input_ids",
        **SMALL,
    )
    out = jb.read_output(tmp_path / "plain")
    expected = reference(texts, add_special_tokens=False)
    assert report.dtype == "int32" and out["input_ids"][0].dtype == np.int32
    for got, want in zip(out["input_ids"], expected, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dtype": "uint8"}, r"dtype=uint8 cannot hold .* 30522 tokens has ids up to 30521"),
        ({"dtype": "float32"}, "integer type"),
        ({"truncation": True}, "truncation=True needs max_length"),
        ({"max_length": 2, "truncation": True}, "no room for text beside .* 2 special tokens"),
        ({"batch_size": 0}, "batch_size must be an int >= 1"),
        ({"checkpoint_every": 1.5}, "checkpoint_every must be an int >= 1"),
        ({"on_error": "ignore"}, "on_error"),
        ({"token_column": "example_index"}, "holds each document's index"),
        ({"text_column": "body"}, "names a column of a file or table"),
    ],
)
def test_bad_options_are_refused_before_anything_is_written(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        jb.tokenize(["a text"], tmp_path / "out", TOKENIZER, progress=False, **options)
    assert not (tmp_path / "out").exists()


def test_bad_sources_and_tokenizers_name_what_is_wrong(tmp_path):
    table = pa.table({"a": ["x"], "b": ["y"], "n": [1], "raw": pa.array([b"z"], pa.binary())})
    with pytest.raises(ValueError, match=r"string columns \['a', 'b'\]; name the text column"):
        jb.tokenize(table, tmp_path / "o", TOKENIZER)
    with pytest.raises(ValueError, match="holds int64, not text"):
        jb.tokenize(table, tmp_path / "o", TOKENIZER, text_column="n")
    with pytest.raises(ValueError, match="decode its bytes"):
        jb.tokenize(table, tmp_path / "o", TOKENIZER, text_column="raw")
    (tmp_path / "corpus.txt").write_text("x\n")
    with pytest.raises(ValueError, match="Parquet, Arrow IPC or JSON Lines"):
        jb.tokenize(tmp_path / "corpus.txt", tmp_path / "o", TOKENIZER)
    with pytest.raises(FileNotFoundError, match="no such file"):
        jb.tokenize(tmp_path / "missing.jsonl", tmp_path / "o", TOKENIZER)
    with pytest.raises(ValueError, match="cannot read .* as a tokenizers tokenizer"):
        jb.tokenize(["x"], tmp_path / "o", tmp_path / "corpus.txt")
    with pytest.raises(TypeError, match="expected a tokenizers.Tokenizer"):
        jb.tokenize(["x"], tmp_path / "o", object())

    class Split:  # A pre-tokenizer in Python: no JSON to key the job on.
        def pre_tokenize(self, pretokenized):
            pass

    custom = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    custom.pre_tokenizer = tokenizers.pre_tokenizers.PreTokenizer.custom(Split())
    with pytest.raises(ValueError, match="cannot be written as JSON .* Custom PreTokenizer"):
        jb.tokenize(["x"], tmp_path / "o", custom)
    with pytest.raises(TypeError, match="expected a list of strings, a path"):
        jb.tokenize({"text": ["x"]}, tmp_path / "o", TOKENIZER)
    assert not (tmp_path / "o").exists()


# -- Bad documents -----------------------------------------------------------

# Documents set aside, by index: (kind, what the reason says).
BAD = {
    1: ("no text", "null"),
    3: ("not text", r"not a string \(found int\)"),
    4: ("empty", "no tokens"),
    5: ("empty", "no tokens"),
    7: ("too long", "over max_length=20"),
    8: ("not text", r"not a string \(found bytes\)"),
    9: ("not text", "lone surrogate|surrogates not allowed"),
}


def bad_corpus() -> list:
    good = ["the first text", "a second one", "three", "four and more"]
    long = "many words " * 20
    return [good[0], None, good[1], 5, "", "  \n ", good[2], long, b"bytes", "a\ud800b", good[3]]


def test_raise_stops_at_the_first_bad_document_and_resumes_with_skip(tmp_path):
    corpus = ["one", "two", "three", "four", *bad_corpus()]  # The first bad one is 5.
    out = tmp_path / "out"
    options = dict(max_length=20, batch_size=2, checkpoint_every=2, progress=False)
    with pytest.raises(ValueError, match=r"document 5 of the list of 15 strings: no text \(null"):
        jb.tokenize(corpus, out, TOKENIZER, **options)
    assert len(list(out.glob("part-*.parquet"))) == 2  # Documents 0-3, committed.
    # What raised committed no bad document, so the job resumes past them.
    report = jb.tokenize(corpus, out, TOKENIZER, on_error="skip", **options)
    kept = [i for i in range(len(corpus)) if i - 4 not in BAD]
    assert_tokens(out, reference([corpus[i] for i in kept]), kept)
    assert report.runs == 2 and report.examples == len(kept) and report.total == len(corpus)
    assert report.skipped_kinds == {"no text": 1, "not text": 3, "empty": 2, "too long": 1}
    assert report.skipped == len(BAD) and report.quarantine == []
    # Now skipping, it is no longer the job that raised: another policy is refused.
    with pytest.raises(jb.JobError, match="on_error: was 'skip', now 'quarantine'"):
        jb.tokenize(corpus, out, TOKENIZER, on_error="quarantine", **options)


def test_a_job_that_committed_nothing_starts_afresh_with_other_settings(tmp_path):
    corpus = bad_corpus()
    with pytest.raises(ValueError, match="document 1 of"):
        jb.tokenize(corpus, tmp_path / "out", TOKENIZER, **SMALL)  # Raised in its first batch.
    report = jb.tokenize(corpus, tmp_path / "out", TOKENIZER, max_length=20, on_error="skip",
                         tag="v2", **SMALL)  # fmt: skip
    assert report.runs == 1 and report.skipped == len(BAD)


def test_quarantine_lists_each_bad_document_with_its_reason(tmp_path):
    corpus = bad_corpus()
    report = jb.tokenize(
        corpus, tmp_path / "out", TOKENIZER, max_length=20, on_error="quarantine", **SMALL
    )
    kept = [i for i in range(len(corpus)) if i not in BAD]
    assert_tokens(tmp_path / "out", reference([corpus[i] for i in kept]), kept)
    assert [q["example"] for q in report.quarantine] == sorted(BAD)
    for q in report.quarantine:
        kind, reason = BAD[q["example"]]
        assert q["kind"] == kind and re.search(reason, q["reason"]), q
    assert report.quarantined == len(BAD) and report.skipped == 0
    text = str(report)
    assert "quarantined 7" in text and "2 x quarantined, empty" in text


def test_a_document_the_tokenizer_fails_on_is_set_aside_alone(tmp_path):
    """A word-level tokenizer without an unknown token fails on a word it
    does not know: the batch encoder fails, each document is encoded alone."""
    models, pre = tokenizers.models, tokenizers.pre_tokenizers
    tok = tokenizers.Tokenizer(models.WordLevel({"a": 0, "b": 1, "c": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre.Whitespace()
    corpus = ["a b", "b c a", "a zebra", "c", "zebra"]
    report = jb.tokenize(corpus, tmp_path / "out", tok, on_error="quarantine", **SMALL)
    assert [(q["example"], q["kind"]) for q in report.quarantine] == [
        (2, "tokenizer error"),
        (4, "tokenizer error"),
    ]
    assert "the tokenizer failed" in report.quarantine[0]["reason"]
    expected = [np.array(e.ids) for e in tok.encode_batch(["a b", "b c a", "c"])]
    assert_tokens(tmp_path / "out", expected, [0, 1, 3])
    assert report.dtype == "uint8"


def test_bad_lines_of_json_lines_are_bad_documents(tmp_path):
    lines = [
        b'{"text": "one line"}',
        b"",
        b"not json",
        b'{"text": 5}',
        b"   ",
        b'{"other": "no text field"}',
        b"[1, 2]",
        b'{"text": "bad \xff byte"}',
        b'{"text": "last line", "n": 1}',
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    report = jb.tokenize(path, tmp_path / "out", TOKENIZER, on_error="quarantine", **SMALL)
    # Blank lines are no documents: 7 documents, of lines 1, 3, 4, 6, 7, 8, 9.
    reasons = {q["example"]: q["reason"] for q in report.quarantine}
    assert sorted(reasons) == [1, 2, 3, 4, 5]
    assert reasons[1].startswith("line 3: not JSON")
    assert reasons[2] == "line 4: field 'text' is a JSON number, not a string"
    assert reasons[3] == "no text (null, or no such field)"
    assert reasons[4] == "line 7: a JSON array, not an object"
    assert reasons[5].startswith("line 8: not valid UTF-8")
    assert_tokens(tmp_path / "out", reference(["one line", "last line"]), [0, 6])


@pytest.mark.parametrize("bad_line", [False, True], ids=["pyarrow", "line-by-line"])
def test_json_lines_resume_mid_file_and_lines_longer_than_a_block(
    tmp_path, texts, monkeypatch, bad_line
):
    """Lines longer than pyarrow's block are read again in larger blocks
    (not line by line); a file pyarrow refuses is read line by line from
    where it failed; either way a crashed job resumes mid-file."""
    monkeypatch.setattr(text_module, "JSON_BLOCK_BYTES", 256)
    lines = [json.dumps({"text": t}) for t in texts]  # texts[301] is 3,000 bytes long
    if bad_line:
        lines[200] = "not json"
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    if not bad_line:
        monkeypatch.setattr(text_module.JsonLinesText, "_lines", None)  # Never called.
    crash_on_shard(monkeypatch, 2)
    options = dict(on_error="skip", **SMALL)
    with pytest.raises(Crash):
        jb.tokenize(tmp_path / "c.jsonl", tmp_path / "out", TOKENIZER, **options)
    monkeypatch.undo()
    monkeypatch.setattr(text_module, "JSON_BLOCK_BYTES", 256)
    report = jb.tokenize(tmp_path / "c.jsonl", tmp_path / "out", TOKENIZER, **options)
    kept = [i for i in range(len(texts)) if not (bad_line and i == 200)]
    assert_tokens(tmp_path / "out", reference([texts[i] for i in kept]), kept)
    assert report.runs == 2 and report.skipped == int(bad_line)


def test_text_that_is_not_utf8_in_a_table_is_a_bad_document(tmp_path):
    raw = pa.array([b"good", b"bad \xff", b"fine"], pa.binary()).view(pa.string())
    report = jb.tokenize(
        pa.table({"text": raw}), tmp_path / "out", TOKENIZER, on_error="quarantine", **SMALL
    )
    assert [(q["example"], q["kind"]) for q in report.quarantine] == [(1, "not text")]
    assert "not valid UTF-8" in report.quarantine[0]["reason"]
    assert_tokens(tmp_path / "out", reference(["good", "fine"]), [0, 2])


# -- Resuming ------------------------------------------------------------------


def test_a_finished_job_is_not_run_again_and_changes_are_refused(tmp_path, texts):
    jb.tokenize(texts, tmp_path / "out", TOKENIZER, **SMALL)
    before = shard_bytes(tmp_path / "out")
    report = jb.tokenize(texts, tmp_path / "out", TOKENIZER, **{**SMALL, "batch_size": 5})
    assert report.runs == 1 and shard_bytes(tmp_path / "out") == before
    for change, message in [
        ({"max_length": 64, "truncation": True}, "option max_length: was None, now 64"),
        ({"tag": "v2"}, "option tag: was None, now 'v2'"),
        ({"dtype": "int32"}, "option dtype: was 'uint16', now 'int32'"),
    ]:
        with pytest.raises(jb.JobError, match=message):
            jb.tokenize(texts, tmp_path / "out", TOKENIZER, **{**SMALL, **change})
    with pytest.raises(jb.JobError, match="input: was"):
        jb.tokenize(texts[:-1], tmp_path / "out", TOKENIZER, **SMALL)
    report = jb.tokenize(texts[:50], tmp_path / "out", TOKENIZER, overwrite=True, **SMALL)
    assert report.examples == 50 and report.runs == 1


@pytest.mark.timeout(600)  # The final run alone may take its own 300 s limit.
def test_kill_9_at_random_moments_then_resume_gives_the_uninterrupted_output(tmp_path):
    corpus = pydoc_paragraphs() * 4
    source = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"text": corpus}), source, row_group_size=3000)
    args = ["--tokenizer", str(TOKENIZER), "--batch-size", "64", "--checkpoint-every", "300"]
    jb.tokenize(source, tmp_path / "reference", TOKENIZER, batch_size=64, checkpoint_every=300,
                progress=False)  # fmt: skip
    job = tmp_path / "job"

    def start():
        return cli("tokenize", "--input", str(source), "--output", str(job), *args, "--no-progress")

    sizes = kill_at_random_moments(
        start, job / "journal.jbj", kills=3, seed=5, grown=600, pause=0.2
    )
    assert len(sizes) >= 2, f"the job finished after {len(sizes)} kills; expected at least 2"
    assert sizes == sorted(sizes)  # Every run made progress.
    finish(start())
    assert shard_bytes(job) == shard_bytes(tmp_path / "reference")
    out = jb.read_output(job)
    np.testing.assert_array_equal(out["example_index"], np.arange(len(corpus)))  # Each once.
    report = json.loads((job / "report.json").read_text())
    assert report["runs"] == len(sizes) + 1 and report["examples"] == len(corpus)
    expected = reference(corpus[:2608])  # The corpus repeats: its first copy is all of it.
    for i in range(0, len(corpus), 997):
        np.testing.assert_array_equal(out["tokens"][i], expected[i % 2608])


# -- The command line -----------------------------------------------------------


def test_cli_tokenizes_resumes_and_refuses(tmp_path, texts, capsys):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"body": t}) + "\n" for t in texts))
    args = ["tokenize", "--input", str(path), "--tokenizer", str(TOKENIZER)]
    args += ["--output", str(tmp_path / "out"), "--text-column", "body", "--no-progress"]
    assert cli_main([*args, "--max-length", "128", "--truncation"]) == 0
    assert "complete; 303 of 303 documents written" in capsys.readouterr().out
    assert_tokens(tmp_path / "out", reference(texts, max_length=128))
    assert cli_main([*args, "--max-length", "64", "--truncation"]) == 2  # Changed: refused.
    assert "option max_length: was 128, now 64" in capsys.readouterr().err
    assert cli_main([*args, "--dtype", "int8"]) == 2
    assert "dtype=int8 cannot hold" in capsys.readouterr().err
    assert cli_main([*args, "--no-special-tokens", "--overwrite"]) == 0
    assert_tokens(tmp_path / "out", reference(texts, add_special_tokens=False))
    assert cli_main(["plan", str(tmp_path / "out"), "--column", "tokens"]) == 0

"""One owner for opening a source (jaxbatch._src.data.opening): a Loader, jb.run
and `jaxbatch plan` open any source through open_source, each check is made
once per job, and every message names the call the user wrote."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from job_functions import summarise

import jaxbatch as jb
from jaxbatch._src.cli.main import main as cli_main
from jaxbatch._src.data import opening
from jaxbatch._src.data.opening import OpenedSource, open_source
from jaxbatch._src.data.sources import StreamedParquet


def write_tokens(path, n=24, seed=0):
    rng = np.random.default_rng(seed)
    tokens = [rng.integers(0, 100, rng.integers(1, 12)).tolist() for _ in range(n)]
    table = pa.table({"tokens": pa.array(tokens, pa.list_(pa.int32())), "label": np.arange(n)})
    pq.write_table(table, path, row_group_size=8)
    return path, tokens


def counting(monkeypatch, name):
    """Counts the calls of opening.`name` (the function itself still runs)."""
    calls = []
    real = getattr(opening, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(opening, name, counted)
    return calls


@pytest.mark.parametrize("stream", [False, True])
def test_a_job_opens_and_checks_its_source_once(tmp_path, monkeypatch, stream):
    """jb.run opens its file once and hands it to its Loader as it is: the
    file is read once (whole, or by row group) and the schema's rules are
    made once, where the job used to make them again in its Loader."""
    path, tokens = write_tokens(tmp_path / "in.parquet")
    opened_paths = counting(monkeypatch, "open_path")
    rules = counting(monkeypatch, "schema_rules")
    streamed = []
    real_init = StreamedParquet.__init__

    def counted_init(self, *args, **kwargs):
        streamed.append(args)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(StreamedParquet, "__init__", counted_init)
    schema = {"tokens": jb.ColumnSchema(max_length=100)}
    options = dict(stream=True, host_memory_limit=2**20) if stream else {}
    report = jb.run(
        summarise, path, tmp_path / "out", planner=jb.PadToMax(4), schema=schema,
        progress=False, **options,
    )  # fmt: skip
    assert report.complete and report.examples == len(tokens)
    assert (len(opened_paths), len(streamed)) == ((0, 1) if stream else (1, 0))
    assert len(rules) == 1
    totals = jb.read_output(tmp_path / "out")["total"]
    np.testing.assert_allclose(totals, [sum(t) for t in tokens])


def test_an_opened_source_is_taken_as_it_is(tmp_path):
    path, tokens = write_tokens(tmp_path / "in.parquet")
    opened = open_source(path, jb.LoaderOptions(column="tokens"))
    assert isinstance(opened, OpenedSource)
    assert open_source(opened, jb.LoaderOptions(columns=["nope"])) is opened
    assert (opened.name, opened.path, opened.length_column) == (str(path), str(path), "tokens")
    assert opened.inputs == (str(path),)
    np.testing.assert_array_equal(opened.dataset.lengths("tokens"), [len(t) for t in tokens])
    with jb.Loader(opened, jb.PadToMax(4), shuffle=False) as loader:
        rows = [
            r[:n] for b in loader for r, n in zip(b["tokens"], b["tokens_lengths"], strict=True)
        ]
    assert [r.tolist() for r in rows[: len(tokens)]] == tokens


def test_the_same_mistake_reads_the_same_after_the_callers_name(tmp_path, capsys):
    """One rule, one text: a Loader, jb.run and `jaxbatch plan` say the same
    about a column the file lacks, each under the name the user called."""
    path, _ = write_tokens(tmp_path / "in.parquet")
    with pytest.raises(ValueError) as loader_error:
        jb.Loader(path, jb.PadToMax(4), column="nope")
    with pytest.raises(ValueError) as run_error:
        jb.run(summarise, path, tmp_path / "out", column="nope", progress=False)
    assert cli_main(["plan", str(path), "--column", "nope"]) == 2
    plan_line = capsys.readouterr().err.strip()
    said = str(loader_error.value).removeprefix("Loader: ")
    assert said.startswith(f"{path} has no column 'nope'")
    assert str(run_error.value) == f"jb.run: {said}"
    assert plan_line == f"jaxbatch plan: {said}"
    assert not (tmp_path / "out").exists()


def test_option_errors_name_jb_run_without_rewriting(tmp_path):
    """The options jb.run builds are checked (by the engine where it owns the
    rule) with jb.run's name in the message, not a Loader's renamed."""
    with pytest.raises(ValueError, match=r"^jb\.run: prefetch must be >= 1, found 0$"):
        jb.LoaderOptions(prefetch=0, who="jb.run")
    with pytest.raises(ValueError, match=r"^Loader: prefetch must be >= 1, found 0$"):
        jb.LoaderOptions(prefetch=0)
    with pytest.raises(ValueError, match=r"^jb\.run: seed must be an int"):
        jb.LoaderOptions(seed=-1, who="jb.run")

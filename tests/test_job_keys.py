"""What a job is keyed on and where its defaults and names come from: the
engine's pad values and schema rules (not Python text, so old job folders
keyed on text still resume), one owner per default, the report's counts from
the engine's loader stats, and the report path of a sharded job."""

import argparse
import inspect
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from job_functions import summarise

import jaxbatch as jb
from jaxbatch import _core
from jaxbatch._src.cli.main import main as cli_main
from jaxbatch._src.cli.run import add_run_parser
from jaxbatch._src.execute.batch_loop import (
    DEFAULT_CPU_BATCH_SIZE,
    DEFAULT_MAX_SHAPES,
    LoopSettings,
)
from jaxbatch._src.job.job import DEFAULT_CHECKPOINT_EVERY
from jaxbatch._src.job.key import pad_key, schema_key


def tokens(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 100, rng.integers(1, 30)).astype(np.int32) for _ in range(n)]


def dataset(n: int) -> jb.Dataset:
    return jb.Dataset.from_arrays({"tokens": tokens(n)})


def records(folder: Path) -> list[dict]:
    journal = _core.Journal(str(folder / "journal.jbj"), _core.JournalAccess.read)
    try:
        return [json.loads(r) for r in journal.records()]
    finally:
        journal.close()


def rewrite_first_record(folder: Path, change) -> None:
    """The journal with its first (job) record changed by `change`, as a
    job of an earlier format wrote it."""
    kept = records(folder)
    change(kept[0])
    journal = _core.Journal(str(folder / "journal.jbj"))
    try:
        journal.truncate(0)
        for r in kept:
            journal.append(json.dumps(r, sort_keys=True, separators=(",", ":")).encode())
    finally:
        journal.close()


SCHEMA = {"tokens": jb.ColumnSchema(dtype=np.int32, max_length=50)}


def run(folder, **options):
    options = {"planner": jb.PadToMax(8), "checkpoint_every": 16, "progress": False} | options
    return jb.run(summarise, dataset(40), folder, column="tokens", **options)


def test_a_job_is_keyed_on_the_engines_pad_values_and_schema_rules(tmp_path):
    run(tmp_path, schema=SCHEMA, pad_value=0.0)
    options = records(tmp_path)[0]["fingerprint"]["options"]
    assert options["pad_value"] == {"default": 0.0, "columns": []}
    assert options["schema"] == [["tokens", "int32", None, 0, 50, False]]
    # Spelled otherwise, the same rules: the job resumes (is complete).
    schema = {"tokens": jb.ColumnSchema(dtype="int32", max_length=50)}
    assert run(tmp_path, schema=schema, pad_value=0).runs == 1
    with pytest.raises(jb.JobError, match="option pad_value"):
        run(tmp_path, schema=schema, pad_value={"tokens": -1})
    with pytest.raises(jb.JobError, match="option schema"):
        run(tmp_path, schema={"tokens": jb.ColumnSchema(max_length=49)}, pad_value=0)


def test_keys_follow_what_the_engine_takes_not_the_spelling():
    assert pad_key(0) == pad_key(0.0) == pad_key({})
    assert pad_key({"a": 1, "b": 2.5}) == pad_key({"b": 2.5, "a": 1.0})
    assert pad_key({"a": 1}) != pad_key(1) != pad_key(0)
    assert schema_key(None) == schema_key({}) == []
    assert schema_key({"x": jb.ColumnSchema(dtype=np.float32)}) == schema_key(
        {"x": jb.ColumnSchema(dtype="float32")}
    )
    assert schema_key({"x": jb.ColumnSchema(finite=True)}) != schema_key({"x": jb.ColumnSchema()})


def test_a_job_keyed_on_python_text_format_2_still_resumes_and_refuses_changes(tmp_path):
    """A folder whose job record holds schema and pad_value as format 2 did
    (their repr) is the same job for the same arguments (pad_value 0 was
    then the default; 0.0 now), and a different one for others."""
    report = run(tmp_path, schema=SCHEMA)
    shards = {p.name: p.read_bytes() for p in tmp_path.glob("part-*.parquet")}

    def as_format_2(record):
        record["fingerprint"]["format"] = 2
        record["fingerprint"]["options"]["schema"] = repr(dict(SCHEMA))
        record["fingerprint"]["options"]["pad_value"] = repr(0)

    rewrite_first_record(tmp_path, as_format_2)
    again = run(tmp_path, schema=SCHEMA)  # The default pad value, 0.0.
    assert again.complete and again.runs == 1 and again.examples == report.examples == 40
    assert {p.name: p.read_bytes() for p in tmp_path.glob("part-*.parquet")} == shards
    with pytest.raises(jb.JobError, match=r"option pad_value: was '0'"):
        run(tmp_path, schema=SCHEMA, pad_value=-1)
    with pytest.raises(jb.JobError, match="option schema: was"):
        run(tmp_path, schema={"tokens": jb.ColumnSchema(max_length=50)})


def test_the_reports_element_counts_are_the_engines(tmp_path):
    """Real and padded elements over every shard: the plan's, as the
    engine's loader counts them, however the job is cut into shards."""
    planner = jb.PadToMax(8)
    want = jb.plan(dataset(40), planner).stats
    for every in (8, 16, 1000):
        report = run(tmp_path / str(every), planner=planner, checkpoint_every=every)
        assert (report.real_elements, report.padded_elements) == (
            want.real_elements,
            want.padded_elements,
        )
        assert report.real_elements == sum(len(t) for t in tokens(40))


def test_the_cli_prints_the_report_a_sharded_job_wrote(tmp_path, capsys):
    source = tmp_path / "in.parquet"
    values = [t.tolist() for t in tokens(20)]
    pq.write_table(pa.table({"tokens": pa.array(values, pa.list_(pa.int32()))}), source)
    functions = Path(__file__).parent / "job_functions.py"
    code = cli_main(
        ["run", f"{functions}:summarise", "--input", str(source), "--column", "tokens",
         "--output", str(tmp_path / "out"), "--shard", "1/2", "--no-progress"]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    report = tmp_path / "out" / "process-00001-of-00002" / "report.json"
    assert f"report written to {report}\n" in printed and report.is_file()


def test_each_default_has_one_owner():
    """jb.run, jb.map and `jaxbatch run` take their shared defaults from
    one place: the engine's (through LoaderOptions) or the batch loop's."""
    loader = jb.LoaderOptions()
    run_defaults = inspect.signature(jb.run).parameters
    map_defaults = inspect.signature(jb.map).parameters
    assert run_defaults["on_error"].default == loader.on_error == "raise"
    assert run_defaults["pad_value"].default == loader.pad_value == _core.DEFAULT_PAD_VALUE
    assert run_defaults["checkpoint_every"].default == DEFAULT_CHECKPOINT_EVERY
    settings = LoopSettings()
    for name in ("on_error", "on_oom", "backoff", "min_batch_size", "check_finite", "check"):
        assert map_defaults[name].default == getattr(settings, name), name
    parser = argparse.ArgumentParser()
    add_run_parser(parser.add_subparsers())
    args = parser.parse_args(["run", "m:f", "--input", "x", "--output", "y"])
    assert args.on_error == loader.on_error
    assert args.checkpoint_every == DEFAULT_CHECKPOINT_EVERY
    assert args.max_shapes == DEFAULT_MAX_SHAPES
    assert DEFAULT_CPU_BATCH_SIZE == 32  # PadToMax's rows on the CLI and batch_size="auto" on CPU

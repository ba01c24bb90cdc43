"""jb.run / `jaxbatch run`: resumable exactly-once jobs, checked against a
NumPy reference and against uninterrupted runs, with kill -9 at random
moments."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from job_functions import fails_on_multiples_of_7, summarise, summarise_reference
from kill_resume import Stopped, cli, finish, kill_at_random_moments, shard_bytes, stop_after_shards

import jaxbatch as jb
from jaxbatch import _core
from jaxbatch._src.cli.main import main as cli_main
from jaxbatch._src.execute.batch_loop import DEFAULT_CPU_BATCH_SIZE

FUNCTIONS = str(Path(__file__).parent / "job_functions.py")
# Rows a batch, as batch_size="auto" gives on CPU: shards close at batch ends, and a
# GPU's "auto" batch may hold every example (one shard), which the shard tests do not want.
ROWS = DEFAULT_CPU_BATCH_SIZE


def token_lists(n: int, seed: int = 0, max_length: int = 40) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 1000, rng.integers(1, max_length)).astype(np.int32) for _ in range(n)]


def dataset(n: int, seed: int = 0) -> jb.Dataset:
    return jb.Dataset.from_arrays({"tokens": token_lists(n, seed)})


def write_parquet(path: Path, tokens: list[np.ndarray]) -> Path:
    table = pa.table({"tokens": pa.array([t.tolist() for t in tokens], pa.list_(pa.int32()))})
    pq.write_table(table, path)
    return path


def assert_matches_reference(out: dict, tokens: list[np.ndarray], skip=()) -> None:
    expected = [i for i in range(len(tokens)) if i not in set(skip)]
    np.testing.assert_array_equal(out["example_index"], expected)
    for row, i in enumerate(expected):
        ref = summarise_reference(tokens[i])
        np.testing.assert_allclose(out["total"][row], ref["total"], rtol=1e-6)
        np.testing.assert_allclose(out["moments"][row], ref["moments"], rtol=1e-5)
        np.testing.assert_array_equal(out["doubled"][row], ref["doubled"])


def test_outputs_match_the_numpy_reference_and_jb_map(tmp_path):
    tokens = token_lists(300)
    ds = jb.Dataset.from_arrays({"tokens": tokens})
    report = jb.run(summarise, ds, tmp_path, checkpoint_every=64, progress=False, batch_size=ROWS)
    out = jb.read_output(tmp_path)
    assert_matches_reference(out, tokens)
    assert out["moments"].shape == (300, 3) and out["doubled"][5].dtype == np.int32
    mapped = jb.map(summarise, ds).outputs
    for row in range(300):
        np.testing.assert_array_equal(out["doubled"][row], mapped[row]["doubled"])
        np.testing.assert_array_equal(out["moments"][row], mapped[row]["moments"])
    assert report.complete and report.examples == 300 and report.total == 300
    assert report.shards == len(list(tmp_path.glob("part-*.parquet"))) >= 300 // 64
    assert report.real_elements == sum(len(t) for t in tokens)
    assert 0 < report.padding_efficiency <= 1 and report.compilations >= 1
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["examples"] == 300 and saved["padding_efficiency"] == report.padding_efficiency


def test_packed_batches_give_the_same_outputs(tmp_path):
    tokens = token_lists(200, seed=3)
    ds = jb.Dataset.from_arrays({"tokens": tokens})

    def per_segment_and_token(row):
        import jax.numpy as jnp

        segments = row["tokens_segment_ids"]
        sums = jnp.zeros(16, jnp.int32).at[segments].add(row["tokens"])[1:]
        return {"total": sums, "doubled": row["tokens"] * 2}

    jb.run(
        per_segment_and_token,
        ds,
        tmp_path,
        planner=jb.Pack(64, 4, max_segments_per_row=15),
        progress=False,
    )
    out = jb.read_output(tmp_path)
    np.testing.assert_array_equal(out["example_index"], np.arange(200))
    np.testing.assert_array_equal(out["total"], [t.sum() for t in tokens])
    for i, t in enumerate(tokens):
        np.testing.assert_array_equal(out["doubled"][i], t * 2)


def test_a_finished_job_is_not_run_again(tmp_path):
    ds = dataset(50)
    jb.run(summarise, ds, tmp_path, checkpoint_every=10, progress=False)
    before = shard_bytes(tmp_path)
    report = jb.run(summarise, ds, tmp_path, checkpoint_every=10, progress=False)
    assert report.complete and report.examples == 50 and report.runs == 1
    assert shard_bytes(tmp_path) == before


def _records(folder: Path) -> list[dict]:
    journal = _core.Journal(str(folder / "journal.jbj"), _core.JournalAccess.read)
    try:
        return [json.loads(r) for r in journal.records()]
    finally:
        journal.close()


def test_a_truncated_last_shard_is_redone(tmp_path):
    ds = dataset(120)
    reference = tmp_path / "reference"
    jb.run(summarise, ds, reference, checkpoint_every=25, progress=False)
    job = tmp_path / "job"
    jb.run(summarise, ds, job, checkpoint_every=25, progress=False)
    last = sorted(job.glob("part-*.parquet"))[-1]
    last.write_bytes(last.read_bytes()[:-100])  # Torn: the disk lost its end.
    report = jb.run(summarise, ds, job, checkpoint_every=25, progress=False)
    assert report.redone_shards == 1 and report.examples == 120 and report.runs == 2
    assert shard_bytes(job) == shard_bytes(reference)


def test_a_corrupt_middle_shard_is_redone_with_what_follows(tmp_path):
    ds = dataset(120)
    jb.run(
        summarise, ds, tmp_path / "reference", checkpoint_every=25, progress=False, batch_size=ROWS
    )
    job = tmp_path / "job"
    jb.run(summarise, ds, job, checkpoint_every=25, progress=False, batch_size=ROWS)
    shards = sorted(job.glob("part-*.parquet"))
    data = bytearray(shards[1].read_bytes())
    data[len(data) // 2] ^= 0xFF  # Same size, one flipped byte.
    shards[1].write_bytes(bytes(data))
    report = jb.run(summarise, ds, job, checkpoint_every=25, progress=False, batch_size=ROWS)
    assert report.redone_shards == len(shards) - 1
    assert shard_bytes(job) == shard_bytes(tmp_path / "reference")


def test_a_shard_written_but_not_journaled_is_replaced(tmp_path):
    """A kill between a shard's write and its journal record leaves an orphan
    file: the next run deletes it and redoes the shard."""
    ds = dataset(100)
    jb.run(
        summarise, ds, tmp_path / "reference", checkpoint_every=30, progress=False, batch_size=ROWS
    )
    job = tmp_path / "job"
    with stop_after_shards(1), pytest.raises(Stopped):  # As if killed after the write.
        jb.run(summarise, ds, job, checkpoint_every=30, progress=False, batch_size=ROWS)
    assert len(list(job.glob("part-*.parquet"))) == 2  # The second is an orphan.
    jb.run(summarise, ds, job, checkpoint_every=30, progress=False, batch_size=ROWS)
    assert shard_bytes(job) == shard_bytes(tmp_path / "reference")
    assert_matches_reference(jb.read_output(job), [ds.example(i)["tokens"] for i in range(100)])


def test_a_torn_journal_record_is_cut_and_its_work_redone(tmp_path):
    ds = dataset(100)
    jb.run(summarise, ds, tmp_path / "reference", checkpoint_every=30, progress=False)
    job = tmp_path / "job"
    jb.run(summarise, ds, job, checkpoint_every=30, progress=False)
    journal = job / "journal.jbj"
    records = _records(job)
    kinds = [r["kind"] for r in records]
    # Cut the journal in the middle of the last shard record (and drop "done").
    last_shard = max(i for i, k in enumerate(kinds) if k == "shard")
    size = sum(
        16 + len(json.dumps(r, sort_keys=True, separators=(",", ":")).encode())
        for r in records[:last_shard]
    )
    with open(journal, "r+b") as f:
        f.truncate(size + 30)
    report = jb.run(summarise, ds, job, checkpoint_every=30, progress=False)
    assert report.examples == 100 and report.runs == 2
    assert shard_bytes(job) == shard_bytes(tmp_path / "reference")


def test_changed_function_input_or_options_are_refused(tmp_path):
    ds = dataset(40)
    jb.run(summarise, ds, tmp_path, checkpoint_every=10, progress=False)
    with pytest.raises(jb.JobError, match="function"):
        jb.run(fails_on_multiples_of_7, ds, tmp_path, progress=False)
    with pytest.raises(jb.JobError, match="input"):
        jb.run(summarise, dataset(40, seed=1), tmp_path, progress=False)
    with pytest.raises(jb.JobError, match="option planner"):
        jb.run(summarise, ds, tmp_path, planner=jb.PadToMax(4), progress=False)
    with pytest.raises(jb.JobError, match="option tag"):
        jb.run(summarise, ds, tmp_path, tag="v2", progress=False)
    report = jb.run(summarise, ds, tmp_path, planner=jb.PadToMax(4), overwrite=True, progress=False)
    assert report.examples == 40 and report.runs == 1


def test_a_folder_of_other_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    for overwrite in (False, True):  # overwrite= deletes a job's own files, never others'.
        with pytest.raises(jb.JobError, match="holds 'notes.txt', which no jaxbatch job wrote"):
            jb.run(summarise, dataset(5), tmp_path, overwrite=overwrite, progress=False)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_two_runs_of_one_job_at_once_are_refused(tmp_path):
    jb.run(summarise, dataset(5), tmp_path, progress=False)
    journal = _core.Journal(str(tmp_path / "journal.jbj"))  # Held, as a running job holds it.
    try:
        with pytest.raises(OSError, match="another process is running this job"):
            jb.run(summarise, dataset(5), tmp_path, progress=False)
    finally:
        journal.close()


def test_quarantined_examples_are_reported_not_written(tmp_path):
    tokens = token_lists(200, seed=5)
    ds = jb.Dataset.from_arrays({"tokens": tokens})
    bad = [i for i, t in enumerate(tokens) if t[0] % 7 == 0]
    assert bad
    # The first bad example in batch order, whichever the plan puts first.
    with pytest.raises(ValueError, match=rf"example ({'|'.join(map(str, bad))}) \(batch"):
        jb.run(fails_on_multiples_of_7, ds, tmp_path / "raise", check_finite=True, progress=False)
    report = jb.run(
        fails_on_multiples_of_7,
        ds,
        tmp_path / "q",
        check_finite=True,
        on_error="quarantine",
        checkpoint_every=50,
        progress=False,
    )
    out = jb.read_output(tmp_path / "q")
    assert sorted(set(range(200)) - set(out["example_index"].tolist())) == bad
    assert report.quarantined == len(bad) and report.examples == 200 - len(bad)
    assert [q["example"] for q in report.quarantine] == bad
    assert all("not finite" in q["reason"] and q["stage"] == "function" for q in report.quarantine)
    report = jb.run(
        fails_on_multiples_of_7,
        ds,
        tmp_path / "s",
        check_finite=True,
        on_error="skip",
        progress=False,
    )
    assert report.skipped == len(bad) and report.quarantined == 0


def test_loader_bad_records_are_counted(tmp_path):
    tokens = token_lists(100, seed=2)
    ds = jb.Dataset.from_arrays({"tokens": tokens})
    schema = {"tokens": jb.ColumnSchema(max_length=30)}
    long = [i for i, t in enumerate(tokens) if len(t) > 30]
    report = jb.run(summarise, ds, tmp_path, schema=schema, on_error="quarantine", progress=False)
    assert report.quarantined == len(long) and report.examples == 100 - len(long)
    assert [q["example"] for q in report.quarantine] == long
    assert all(q["stage"] == "loader" for q in report.quarantine)
    assert_matches_reference(jb.read_output(tmp_path), tokens, skip=long)


def test_read_output_refuses_an_unfinished_job(tmp_path):
    ds = dataset(60)
    jb.run(summarise, ds, tmp_path, checkpoint_every=20, progress=False)
    journal = _core.Journal(str(tmp_path / "journal.jbj"))
    journal.truncate(len(journal.records()) - 1)  # Drop "done".
    journal.close()
    with pytest.raises(ValueError, match="has not finished"):
        jb.read_output(tmp_path)
    assert len(jb.read_output(tmp_path, partial=True)["example_index"]) == 60


def test_bad_arguments_name_the_option(tmp_path):
    with pytest.raises(ValueError, match="checkpoint_every"):
        jb.run(summarise, dataset(3), tmp_path, checkpoint_every=0)
    with pytest.raises(ValueError, match="on_error"):
        jb.run(summarise, dataset(3), tmp_path, on_error="ignore")
    (tmp_path / "file").write_text("x")
    with pytest.raises(jb.JobError, match="is a file"):
        jb.run(summarise, dataset(3), tmp_path / "file")


def _cli(*args: str) -> subprocess.Popen:
    return cli("run", *args)


def _run_args(source, output, *options: str) -> list[str]:
    """`jaxbatch run` arguments for the test function over a Parquet file."""
    base = [f"{FUNCTIONS}:summarise", "--input", str(source), "--column", "tokens"]
    return [*base, "--output", str(output), *options, "--no-progress"]


def test_cli_runs_resumes_and_refuses(tmp_path):
    tokens = token_lists(80)
    source = write_parquet(tmp_path / "in.parquet", tokens)
    args = _run_args(source, tmp_path / "out", "--checkpoint-every", "20")
    assert cli_main(["run", *args]) == 0
    assert_matches_reference(jb.read_output(tmp_path / "out"), tokens)
    assert cli_main(["run", *args, "--batch-size", "4"]) == 2  # Changed options: refused.
    assert cli_main(["run", *args, "--batch-size", "4", "--overwrite"]) == 0
    assert cli_main(["run", "no_such_module:f", *args[1:]]) == 2


@pytest.mark.timeout(600)  # The final run alone may take its own 300 s limit.
def test_kill_9_at_random_moments_then_resume_gives_the_uninterrupted_output(tmp_path):
    tokens = token_lists(3000, seed=11, max_length=24)
    source = write_parquet(tmp_path / "in.parquet", tokens)

    def args(out):
        return _run_args(
            source, out, "--planner", "pad", "--batch-size", "8", "--checkpoint-every", "40"
        )

    assert cli_main(["run", *args(tmp_path / "reference")]) == 0
    job = tmp_path / "job"
    journal = job / "journal.jbj"
    sizes = kill_at_random_moments(lambda: _cli(*args(job)), journal, kills=6, seed=7)
    kills = len(sizes)
    assert kills >= 5, f"the job finished after {kills} kills; expected at least 5"
    assert sizes == sorted(sizes)  # Every run made progress.
    finish(_cli(*args(job)))
    assert shard_bytes(job) == shard_bytes(tmp_path / "reference")
    out = jb.read_output(job)
    assert_matches_reference(out, tokens)
    report = json.loads((job / "report.json").read_text())
    assert report["runs"] == kills + 1 and report["examples"] == 3000
    assert not [p for p in os.listdir(job) if ".tmp-" in p]


def test_a_job_on_several_processes_writes_each_example_once(tmp_path):
    tokens = token_lists(90, seed=4)
    ds = jb.Dataset.from_arrays({"tokens": tokens})
    planner = jb.AutoBuckets(3, batch_size=4)
    with pytest.raises(ValueError, match="shard"):
        jb.run(summarise, ds, tmp_path / "bad", planner=planner, shard=(2, 2), progress=False)
    reports = [
        jb.run(summarise, ds, tmp_path, planner=planner, shard=(i, 3), progress=False)
        for i in (0, 2)
    ]
    with pytest.raises(ValueError, match=r"processes \[1\] are missing"):
        jb.read_output(tmp_path)
    partial = jb.read_output(tmp_path, partial=True)
    reports.append(jb.run(summarise, ds, tmp_path, planner=planner, shard=(1, 3), progress=False))
    assert sum(r.examples for r in reports) == sum(r.total for r in reports) == 90
    assert all(r.examples > 0 for r in reports)
    out = jb.read_output(tmp_path)
    assert_matches_reference(out, tokens)
    assert set(partial["example_index"]) < set(out["example_index"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"process-0000{i}-of-00003" for i in range(3)
    ]
    # Another count in the same folder: refused, naming elastic (test_job_elastic.py).
    with pytest.raises(
        ValueError, match=r"run on 3 process\(es\); this call runs on 2. Pass elastic"
    ):
        jb.run(summarise, ds, tmp_path, planner=planner, shard=(0, 2), progress=False)
    assert not (tmp_path / "process-00000-of-00002").exists()
    # A part of another count put there by hand is refused on read.
    shutil.copytree(tmp_path / "process-00000-of-00003", tmp_path / "process-00000-of-00002")
    with pytest.raises(ValueError, match=r"on \[2, 3\] processes; expected one count .*elastic"):
        jb.read_output(tmp_path)


def test_kill_9_of_one_process_then_rerunning_all_resumes(tmp_path):
    tokens = token_lists(1500, seed=12, max_length=24)
    source = write_parquet(tmp_path / "in.parquet", tokens)
    out = tmp_path / "out"

    def args(i):
        return _run_args(source, out, "--planner", "pad", "--batch-size", "8", "--shard", f"{i}/2")

    first = _cli(*args(0)[:-1], "--checkpoint-every", "40", "--no-progress")
    journal = out / "process-00000-of-00002" / "journal.jbj"
    deadline = time.monotonic() + 120
    while first.poll() is None and time.monotonic() < deadline:
        if journal.exists() and journal.stat().st_size > 3000:
            break
        time.sleep(0.01)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert cli_main(["run", *args(1)[:-1], "--checkpoint-every", "40", "--no-progress"]) == 0
    with pytest.raises(ValueError, match="has not finished"):
        jb.read_output(out)
    for i in (0, 1):  # Re-run all: the finished one is complete, the killed one resumes.
        assert cli_main(["run", *args(i)[:-1], "--checkpoint-every", "40", "--no-progress"]) == 0
    assert_matches_reference(jb.read_output(out), tokens)
    report = json.loads((out / "process-00000-of-00002" / "report.json").read_text())
    assert report["runs"] >= 2 or first.returncode == 0


def test_a_job_streams_a_parquet_file_by_row_group_and_resumes(tmp_path):
    """stream=True with a host_memory_limit below the file: the job reads it
    by row group (as a Loader does), writes what reading it whole writes,
    and resumes after a crash; batch_size='auto' cannot plan from values it
    does not hold, and says so."""
    tokens = token_lists(300, seed=4)
    source = tmp_path / "in.parquet"
    table = pa.table({"tokens": pa.array([t.tolist() for t in tokens], pa.list_(pa.int32()))})
    pq.write_table(table, source, row_group_size=25)
    common = dict(planner=jb.PadToMax(8), checkpoint_every=40, progress=False)
    whole = jb.run(summarise, source, tmp_path / "whole", **common)
    limit = 60_000
    assert pq.ParquetFile(source).metadata.num_rows == 300
    with pytest.raises(ValueError, match="batch_size='auto' plans memory"):
        jb.run(summarise, source, tmp_path / "auto", stream=True, host_memory_limit=limit)

    streamed = tmp_path / "streamed"
    with stop_after_shards(2), pytest.raises(Stopped):
        jb.run(summarise, source, streamed, stream=True, host_memory_limit=limit, **common)
    report = jb.run(summarise, source, streamed, stream=True, host_memory_limit=limit, **common)
    assert report.runs == 2 and report.examples == whole.examples == 300
    assert_matches_reference(jb.read_output(streamed), tokens)
    assert shard_bytes(streamed) == shard_bytes(tmp_path / "whole")
    # It did stream: its input is keyed on row groups, not on the file read whole.
    inputs = [
        _records(folder)[0]["fingerprint"]["input"] for folder in (streamed, tmp_path / "whole")
    ]
    assert inputs[0] != inputs[1]


def test_errors_of_the_source_and_options_name_jb_run(tmp_path):
    """jb.run opens its source with the Loader's code; its errors name jb.run,
    the call the user wrote, and nothing is made in the output folder."""
    source = write_parquet(tmp_path / "in.parquet", token_lists(10))
    out = tmp_path / "out"
    cases = [
        (dict(stream="yes"), ValueError, "jb.run: stream must be None, True or False"),
        (dict(stream=True), ValueError, "jb.run: stream=True needs host_memory_limit"),
        (dict(num_threads=-1), ValueError, r"jb.run: num_threads must be >= 1"),
        (dict(schema={"nope": jb.ColumnSchema()}), ValueError, "jb.run: schema names column"),
        (dict(pad_value={"nope": 1}), ValueError, "jb.run: pad_value names column 'nope'"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            jb.run(summarise, source, out, planner=jb.PadToMax(4), progress=False, **kwargs)
    with pytest.raises(FileNotFoundError, match="jb.run: "):
        jb.run(summarise, tmp_path / "missing.parquet", out, progress=False)
    assert not out.exists()

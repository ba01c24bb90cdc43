"""jb.run(..., elastic=True): a job stopped (or killed) on n processes
continues on m. read_output then equals the uninterrupted one-process job's
output value for value, each example once; the earlier parts' files are
never changed; a changed job, a missing elastic=True and a chain whose parts
do not continue each other are refused, naming what and where."""

import contextlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from job_functions import fails_on_multiples_of_7, summarise
from kill_resume import Stopped, cli, kill_at_random_moments, stop_after_shards
from test_job import _records, token_lists, write_parquet

import jaxbatch as jb
from jaxbatch._src.cli.main import main as cli_main

FUNCTIONS = str(Path(__file__).parent / "job_functions.py")
# Values below 100: every sum summarise takes is exact in float32, whatever
# the batch's padded length, so outputs compare exactly.
TOKENS = [t % 100 for t in token_lists(240, seed=9)]
DATA = jb.Dataset.from_arrays({"tokens": TOKENS})
COMMON = dict(planner=jb.AutoBuckets(3, batch_size=4), checkpoint_every=20, progress=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The job run uninterrupted on one process."""
    out = tmp_path_factory.mktemp("reference")
    jb.run(summarise, DATA, out, **COMMON)
    return jb.read_output(out)


def assert_same_output(got: dict, want: dict) -> None:
    np.testing.assert_array_equal(got["example_index"], want["example_index"])
    np.testing.assert_array_equal(got["total"], want["total"])
    np.testing.assert_array_equal(got["moments"], want["moments"])
    assert len(got["doubled"]) == len(want["doubled"])
    for a, b in zip(got["doubled"], want["doubled"], strict=True):
        np.testing.assert_array_equal(a, b)


def run_stopped(out: Path, n: int, stops: list[int | None], **options) -> None:
    """Process i of n commits stops[i] shards and stops (None: finishes)."""
    for i, stop in enumerate(stops):
        if stop is None:
            jb.run(summarise, DATA, out, shard=(i, n), **COMMON, **options)
            continue
        with stop_after_shards(stop), pytest.raises(Stopped):
            jb.run(summarise, DATA, out, shard=(i, n), **COMMON, **options)


def file_bytes(out: Path) -> dict[Path, bytes]:
    """Every file under `out`, by path."""
    return {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def assert_unchanged(before: dict[Path, bytes]) -> None:
    assert {p: p.read_bytes() for p in before} == before


def continues(part: Path) -> dict:
    return _records(part)[0]["continues"]


@pytest.mark.parametrize(("n", "m"), [(1, 2), (3, 2), (2, 3), (4, 3)])
def test_a_job_stopped_on_n_processes_finishes_on_m(tmp_path, reference, n, m):
    # Each stops after one or two shards; of several, the last finishes.
    stops = [i % 2 + 1 for i in range(n)]
    if n > 1:
        stops[-1] = None
    run_stopped(tmp_path, n, stops)
    done_before = len(jb.read_output(tmp_path, partial=True)["example_index"])
    before = file_bytes(tmp_path)
    with pytest.raises(ValueError, match=f"this call runs on {m}. Pass elastic=True"):
        jb.run(summarise, DATA, tmp_path, shard=(0, m), **COMMON)
    reports = [
        jb.run(summarise, DATA, tmp_path, shard=(j, m), elastic=True, **COMMON) for j in range(m)
    ]
    assert_unchanged(before)  # The earlier parts: read, never written.
    assert_same_output(jb.read_output(tmp_path), reference)
    # The new processes did only what was left, and shared it.
    assert sum(r.examples for r in reports) == 240 - done_before
    assert all(r.examples > 0 for r in reports)
    new = [tmp_path / f"process-{j:05d}-of-{m:05d}-generation-1" for j in range(m)]
    assert {continues(p)["remaining"] for p in new} == {240 - done_before}
    # Run again, each is complete: nothing is redone.
    again = jb.run(summarise, DATA, tmp_path, shard=(0, m), elastic=True, **COMMON)
    assert again.runs == 1 and again.examples == reports[0].examples


def test_a_damaged_shard_of_an_earlier_part_is_redone_and_left_as_it_is(tmp_path, reference):
    run_stopped(tmp_path, 2, [3, None])
    damaged = tmp_path / "process-00001-of-00002" / "part-000001.parquet"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    before = file_bytes(tmp_path)
    for j in range(3):
        jb.run(summarise, DATA, tmp_path, shard=(j, 3), elastic=True, **COMMON)
    assert_unchanged(before)  # The damaged shard too: a job never changes another run's file.
    # The shard before the damaged one is taken; it and those after it are redone.
    taken = continues(tmp_path / "process-00000-of-00003-generation-1")["parts"]
    recorded = len([r for r in _records(damaged.parent) if r["kind"] == "shard"])
    assert taken[1] == {
        "part": "process-00001-of-00002",
        "shards": 1,
        "recorded": recorded,
        "examples": taken[1]["examples"],
    }
    assert recorded > 2 and taken[0]["shards"] == 3
    assert_same_output(jb.read_output(tmp_path), reference)  # Never the damaged shard.


def test_a_count_that_comes_back_continues_the_chain(tmp_path, reference):
    run_stopped(tmp_path, 2, [1, 1])
    run_stopped(tmp_path, 3, [1, 2, None], elastic=True)  # Generation 1, stopped again.
    with pytest.raises(ValueError, match=r"process-00000-of-00003-generation-1 has not finished"):
        jb.read_output(tmp_path)
    for j in range(2):  # Back on 2 processes: generation 2, continuing both before it.
        jb.run(summarise, DATA, tmp_path, shard=(j, 2), elastic=True, **COMMON)
    third = continues(tmp_path / "process-00001-of-00002-generation-2")
    assert third["generation"] == 2 and len(third["parts"]) == 5
    assert_same_output(jb.read_output(tmp_path), reference)


def test_a_changed_job_or_a_broken_chain_is_refused_naming_it(tmp_path, reference):
    run_stopped(tmp_path, 2, [1, None])
    with pytest.raises(
        ValueError, match=r"elastic=True continues the same job only.*\n  option tag"
    ):
        jb.run(summarise, DATA, tmp_path, shard=(0, 3), elastic=True, tag="v2", **COMMON)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "process-00000-of-00002",
        "process-00001-of-00002",
    ]
    # An earlier part run again after the chain continued it (a straggler
    # that was not dead): played by finishing process 0 in a copy first.
    copy = tmp_path.parent / "copy"
    shutil.copytree(tmp_path, copy)
    jb.run(summarise, DATA, copy, shard=(0, 2), **COMMON)
    for j in range(3):
        jb.run(summarise, DATA, tmp_path, shard=(j, 3), elastic=True, **COMMON)
    assert_same_output(jb.read_output(tmp_path), reference)
    original = tmp_path.parent / "original"
    (tmp_path / "process-00000-of-00002").rename(original)
    shutil.copytree(copy / "process-00000-of-00002", tmp_path / "process-00000-of-00002")
    with pytest.raises(ValueError, match=r"process-00000-of-00002 holds \d+ shard records, but "
                       r"generation 1 continued it when it held 1: it was run again"):  # fmt: skip
        jb.read_output(tmp_path)
    shutil.rmtree(tmp_path / "process-00000-of-00002")
    original.rename(tmp_path / "process-00000-of-00002")
    assert_same_output(jb.read_output(tmp_path), reference)


@pytest.mark.timeout(600)
def test_kill_9_on_2_processes_then_elastic_on_3_from_the_cli(tmp_path):
    tokens = [t % 100 for t in token_lists(1500, seed=12, max_length=24)]
    source = write_parquet(tmp_path / "in.parquet", tokens)
    out = tmp_path / "out"

    def args(i, n):
        options = ["--planner", "pad", "--batch-size", "8", "--checkpoint-every", "40"]
        base = [f"{FUNCTIONS}:summarise", "--input", str(source), "--column", "tokens"]
        return [*base, "--output", str(out), *options, "--shard", f"{i}/{n}", "--no-progress"]

    for i in range(2):
        journal = out / f"process-{i:05d}-of-00002" / "journal.jbj"
        killed = kill_at_random_moments(
            lambda i=i: cli("run", *args(i, 2)), journal, kills=1, seed=i
        )
        assert len(killed) == 1  # Killed mid-job, not finished.
    assert cli_main(["run", *args(0, 3)]) == 2  # Refused: another count, elastic named.
    for j in range(3):
        assert cli_main(["run", *args(j, 3), "--elastic"]) == 0
    reference = tmp_path / "reference"
    jb.run(summarise, jb.Dataset.from_arrays({"tokens": tokens}), reference, **COMMON)
    assert_same_output(jb.read_output(out), jb.read_output(reference))


def test_a_finished_job_continued_on_another_count_has_nothing_left(tmp_path, reference):
    run_stopped(tmp_path, 2, [None, None])
    reports = [
        jb.run(summarise, DATA, tmp_path, shard=(j, 3), elastic=True, **COMMON) for j in range(3)
    ]
    assert [r.examples for r in reports] == [0, 0, 0] and all(r.complete for r in reports)
    assert continues(tmp_path / "process-00002-of-00003-generation-1")["remaining"] == 0
    assert_same_output(jb.read_output(tmp_path), reference)


def test_set_aside_examples_are_taken_or_redone_under_the_inputs_indices(tmp_path):
    """Examples the function's check and the loader's schema set aside: a
    taken shard's stay taken; the new processes name theirs by the input's
    index (not the view's), and the chain holds each example once."""
    options = dict(
        COMMON,
        check_finite=True,
        on_error="quarantine",
        schema={"tokens": jb.ColumnSchema(max_length=30)},
    )
    jb.run(fails_on_multiples_of_7, DATA, tmp_path / "reference", **options)
    out = tmp_path / "out"
    for i, stop in enumerate([1, None, 2]):
        with contextlib.ExitStack() as stack:
            if stop is not None:
                stack.enter_context(stop_after_shards(stop))
                stack.enter_context(pytest.raises(Stopped))
            jb.run(fails_on_multiples_of_7, DATA, out, shard=(i, 3), **options)
    taken = {
        b["example"]
        for i in range(3)
        for r in _records(out / f"process-{i:05d}-of-00003")
        if r["kind"] == "shard"
        for b in r["bad"]
    }
    reports = [
        jb.run(fails_on_multiples_of_7, DATA, out, shard=(j, 2), elastic=True, **options)
        for j in range(2)
    ]
    redone = [q for r in reports for q in r.quarantine]
    long = {i for i, t in enumerate(TOKENS) if len(t) > 30}
    non_finite = {i for i, t in enumerate(TOKENS) if len(t) <= 30 and t[0] % 7 == 0}
    assert long and non_finite and taken
    assert {q["example"] for q in redone if q["stage"] == "loader"} == long
    by_function = [q["example"] for q in redone if q["stage"] == "function"]
    assert sorted(by_function + sorted(taken)) == sorted(non_finite)
    got, want = jb.read_output(out), jb.read_output(tmp_path / "reference")
    np.testing.assert_array_equal(got["example_index"], want["example_index"])
    np.testing.assert_array_equal(got["output"], want["output"])


def test_a_part_the_chain_does_not_continue_is_refused_on_read(tmp_path, reference):
    """Process 1 of 2 never ran before the job came back on 3; a part put in
    its place afterwards (here: by hand) is not one the chain continues."""
    jb.run(summarise, DATA, tmp_path, shard=(0, 2), **COMMON)
    for j in range(3):
        jb.run(summarise, DATA, tmp_path, shard=(j, 3), elastic=True, **COMMON)
    assert_same_output(jb.read_output(tmp_path), reference)
    shutil.copytree(tmp_path / "process-00000-of-00002", tmp_path / "process-00001-of-00002")
    with pytest.raises(ValueError, match="process-00001-of-00002 of an earlier generation is not "
                       "among the parts generation 1 continues"):  # fmt: skip
        jb.read_output(tmp_path)


def test_elastic_must_be_a_bool(tmp_path):
    with pytest.raises(TypeError, match="jb.run: elastic must be a bool, found 'no'"):
        jb.run(summarise, DATA, tmp_path / "out", elastic="no", **COMMON)
    assert not (tmp_path / "out").exists()

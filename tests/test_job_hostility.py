"""Jobs and their readers against a hostile or careless filesystem: foreign
files in the output folder, the input inside it, symbolic links in place of
the job's files, a read-only filesystem, a crafted journal, and a journal
damaged at every byte. A job never deletes or changes a file it did not
write; a reader never changes anything; damage is reported, never cut."""

import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from job_functions import summarise, summarise_reference

import jaxbatch as jb
from jaxbatch import _core
from jaxbatch._src.job import folder as job_folder

FUNCTIONS = str(Path(__file__).parent / "job_functions.py")
TIMEOUT_S = 120


def tokens(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 1000, rng.integers(1, 30)).astype(np.int32) for _ in range(n)]


def write_parquet(path: Path, values: list[np.ndarray]) -> Path:
    table = pa.table({"tokens": pa.array([t.tolist() for t in values], pa.list_(pa.int32()))})
    pq.write_table(table, path)
    return path


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every entry below `folder`: content hash (or link target) and mtime."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        if p.is_symlink():
            out[str(p.relative_to(folder))] = ("link:" + os.readlink(p), st.st_mtime_ns)
        elif p.is_file():
            out[str(p.relative_to(folder))] = (
                hashlib.sha256(p.read_bytes()).hexdigest(),
                st.st_mtime_ns,
            )
        else:
            out[str(p.relative_to(folder))] = ("dir", 0)
    return out


def run_job(values, output, **options):
    ds = jb.Dataset.from_arrays({"tokens": values})
    options.setdefault("checkpoint_every", 10)
    options.setdefault("planner", jb.PadToMax(5))  # Shards of 10 examples.
    return jb.run(summarise, ds, output, progress=False, **options)


def assert_matches_reference(out: dict, values: list[np.ndarray]) -> None:
    np.testing.assert_array_equal(out["example_index"], np.arange(len(values)))
    for row, t in enumerate(values):
        np.testing.assert_allclose(out["total"][row], summarise_reference(t)["total"], rtol=1e-6)
        np.testing.assert_array_equal(out["doubled"][row], t * 2)


def journal_records(folder: Path) -> list[dict]:
    journal = _core.Journal(str(folder / "journal.jbj"), _core.JournalAccess.read)
    try:
        return [json.loads(r) for r in journal.records()]
    finally:
        journal.close()


# -- Foreign files ---------------------------------------------------------------


def test_a_dataset_folder_given_as_output_is_refused_and_left_whole(tmp_path):
    """pyarrow's write_dataset and Spark name files part-0.parquet: a job told
    to write into such a folder (its input among them) refuses, deleting
    nothing."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        write_parquet(corpus / f"part-{i}.parquet", tokens(20, seed=i))
    (corpus / "part-000000.parquet").write_bytes(b"a file with a shard's very name")
    before = snapshot(corpus)
    for overwrite in (False, True):
        with pytest.raises(jb.JobError, match="lies inside the job's output folder"):
            jb.run(
                summarise, corpus / "part-0.parquet", corpus, overwrite=overwrite, progress=False
            )
        with pytest.raises(jb.JobError, match="holds 'part-0.parquet', 'part-000000.parquet'"):
            run_job(tokens(5), corpus, overwrite=overwrite)
    args = ["run", f"{FUNCTIONS}:summarise", "--input", str(corpus / "part-0.parquet"),
            "--output", str(corpus), "--no-progress"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "jaxbatch", *args], capture_output=True, text=True,
        timeout=TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "lies inside the job's output folder" in done.stderr
    assert snapshot(corpus) == before


def test_a_memory_mapped_input_inside_the_output_is_refused(tmp_path):
    import pyarrow.feather as feather

    out = tmp_path / "out"
    out.mkdir()
    feather.write_feather(
        pa.table({"tokens": pa.array([[1, 2], [3]], pa.list_(pa.int32()))}),
        out / "data.arrow",
        compression="uncompressed",
    )
    loader_source = jb.Loader(out / "data.arrow", jb.PadToMax(2)).dataset
    with pytest.raises(jb.JobError, match="lies inside the job's output folder"):
        jb.run(summarise, loader_source, out, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["data.arrow"]


def test_a_file_dropped_into_a_job_folder_is_refused_not_deleted(tmp_path):
    """A foreign file among a job's own, even one named like the shard the
    job would write next, is never deleted or overwritten."""
    values = tokens(40)
    out = tmp_path / "out"
    run_job(values, out)
    shards = sorted(p.name for p in out.glob("part-*.parquet"))
    next_shard = f"part-{len(shards):06d}.parquet"
    (out / next_shard).write_bytes(b"mine")
    (out / "notes.txt").write_text("mine too")
    before = snapshot(out)
    for overwrite in (False, True):
        with pytest.raises(jb.JobError, match=f"holds 'notes.txt', '{next_shard}', which the job"):
            run_job(values, out, overwrite=overwrite)
    assert snapshot(out) == before
    assert_matches_reference(jb.read_output(out), values)  # A reader minds only the job's files.


# Every file a job writes, with what a foreign one named so holds and what the
# refusal says. The job's lock is the journal's own (flock): no lock file.
FOREIGN_NAMED_LIKE_THE_JOBS = {
    "journal.jbj": (b"my notes, not a journal", "journal.jbj does not begin with a jaxbatch"),
    "report.json": (b'{"my": "notes"}', "report.json is not a job's report"),
    "part-000000.parquet": (b"mine", "part-000000.parquet does not begin as Parquet does"),
    ".part-000000.parquet.tmp-1-0": (b"mine", "tmp-1-0 does not begin as Parquet does"),
    ".report.json.tmp-1-0": (b"mine", "tmp-1-0 does not begin as a job's report does"),
}


@pytest.mark.parametrize("name", sorted(FOREIGN_NAMED_LIKE_THE_JOBS))
@pytest.mark.parametrize("folder", ["new", "a job's"])
def test_a_foreign_file_named_like_a_job_file_is_refused_and_left_whole(tmp_path, name, folder):
    """A name is not ownership: a file named like the journal, the report, a
    shard or a temporary, alone in a folder or in place of a finished job's
    own, holding what the job would not write there, is refused with and
    without overwrite=True, and left byte for byte (overwrite=True used to
    cut a foreign journal.jbj to nothing, and the job to delete or replace
    the others)."""
    values = tokens(20)
    out = tmp_path / "out"
    out.mkdir()
    if folder == "a job's":
        run_job(values, out)
    content, refusal = FOREIGN_NAMED_LIKE_THE_JOBS[name]
    if folder == "new" and name != "journal.jbj":
        refusal = "which no jaxbatch job wrote"
    (out / name).write_bytes(content)
    before = snapshot(out)
    for overwrite in (False, True):
        with pytest.raises(jb.JobError, match=refusal):
            run_job(values, out, overwrite=overwrite)
        assert snapshot(out) == before, f"overwrite={overwrite} changed the folder"


@pytest.mark.parametrize("name", ["part-000000.parquet", ".part-000000.parquet.tmp-1-0"])
def test_a_fifo_named_like_a_shard_is_refused_without_blocking(tmp_path, name):
    """A FIFO has no bytes to lose by size, but it is not the job's: it is
    refused (never opened, so nothing blocks on it) and left in place, with
    and without overwrite=True."""
    values = tokens(20)
    out = tmp_path / "out"
    out.mkdir()
    run_job(values, out)
    (out / name).unlink(missing_ok=True)
    os.mkfifo(out / name)
    for overwrite in (False, True):
        with pytest.raises(jb.JobError, match=f"{name} is not a regular file"):
            run_job(values, out, overwrite=overwrite)
        assert (out / name).is_fifo()


def test_a_file_put_at_the_next_shards_name_while_the_job_runs_is_not_replaced(
    tmp_path, monkeypatch
):
    values = tokens(30)
    out = tmp_path / "out"
    real_append = job_folder.Journal.append

    def plant_before_shard_1(self, record):
        real_append(self, record)
        if record == {"kind": "writing", "shard": 1, "file": "part-000001.parquet"}:
            (out / "part-000001.parquet").write_bytes(b"mine")

    monkeypatch.setattr(job_folder.Journal, "append", plant_before_shard_1)
    with pytest.raises(jb.JobError, match="holds 'part-000001.parquet', which the job did not"):
        run_job(values, out)
    assert (out / "part-000001.parquet").read_bytes() == b"mine"


def test_a_crafted_journal_cannot_name_other_files(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    journal = _core.Journal(str(out / "journal.jbj"))
    job = {"kind": "job", "fingerprint": {}, "planner": {}}
    journal.append(json.dumps(job).encode())
    journal.append(json.dumps({"kind": "writing", "shard": 0, "file": "../victim.txt"}).encode())
    journal.close()
    with pytest.raises(jb.JobError, match="names the file '../victim.txt'"):
        run_job(tokens(5), out)
    with pytest.raises(jb.JobError, match="names the file '../victim.txt'"):
        jb.read_output(out)
    assert victim.read_text() == "keep me"


# -- Symbolic links ---------------------------------------------------------------


def test_a_symlinked_journal_is_refused_by_writers_and_readers(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("not a journal")
    out = tmp_path / "out"
    out.mkdir()
    (out / "journal.jbj").symlink_to(precious)
    with pytest.raises(OSError, match="symbolic link"):
        run_job(tokens(5), out)
    with pytest.raises(OSError, match="symbolic link"):
        jb.read_output(out)
    assert precious.read_text() == "not a journal"


def test_a_shard_replaced_by_a_link_is_refused(tmp_path):
    values = tokens(30)
    out = tmp_path / "out"
    run_job(values, out)
    copy = tmp_path / "copy.parquet"
    shutil.copy(out / "part-000001.parquet", copy)
    (out / "part-000001.parquet").unlink()
    (out / "part-000001.parquet").symlink_to(copy)
    before = snapshot(tmp_path)
    with pytest.raises(OSError, match="part-000001.parquet is a symbolic link"):
        jb.read_output(out)
    with pytest.raises(jb.JobError, match="part-000001.parquet is a symbolic link"):
        run_job(values, out)
    assert snapshot(tmp_path) == before


def test_a_symlinked_output_folder_is_followed_and_a_dangling_one_named(tmp_path):
    values = tokens(12)
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)
    run_job(values, tmp_path / "out")
    assert_matches_reference(jb.read_output(tmp_path / "out"), values)
    assert (real / "journal.jbj").is_file()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(jb.JobError, match="symbolic link to .*nowhere, which does not exist"):
        run_job(values, tmp_path / "dangling")
    assert not (tmp_path / "nowhere").exists()


# -- Read-only -------------------------------------------------------------------


READ_BACK = """
import json, sys
import jaxbatch as jb
out = jb.read_output(sys.argv[1])
print(json.dumps({"index": out["example_index"].tolist(), "total": out["total"].tolist()}))
"""


def read_only_copy(folder: Path, tmp_path: Path) -> tuple[Path, dict]:
    """A read-only copy of `folder`: on a read-only tmpfs when this process
    may mount one, else files without write permission and a reader running
    as nobody. Returns the copy and the subprocess options that read it."""
    mount = tmp_path / "ro"
    mount.mkdir()
    mounted = (
        os.geteuid() == 0
        and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],
                           capture_output=True).returncode == 0
    )  # fmt: skip
    shutil.copytree(folder, mount / "job")
    if mounted:
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        return mount / "job", {}
    for p in [mount / "job", *(mount / "job").rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    return mount / "job", ({"user": 65534} if os.geteuid() == 0 else {})


def test_a_finished_job_reads_from_a_read_only_filesystem(tmp_path):
    values = tokens(35)
    run_job(values, tmp_path / "out")
    copy, options = read_only_copy(tmp_path / "out", tmp_path)
    try:
        before = snapshot(copy)
        done = subprocess.run(
            [sys.executable, "-c", READ_BACK, str(copy)], capture_output=True, text=True,
            timeout=TIMEOUT_S, **options,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        read = json.loads(done.stdout)
        assert read["index"] == list(range(35))
        np.testing.assert_allclose(read["total"], [t.sum() for t in values], rtol=1e-6)
        assert snapshot(copy) == before
    finally:
        subprocess.run(["umount", str(tmp_path / "ro")], capture_output=True)


# -- Damage -----------------------------------------------------------------------


def test_a_journal_damaged_at_every_byte_is_reported_never_cut(tmp_path):
    """Each flipped byte of a finished job's journal: a reader reports the
    damage (OSError naming the byte and record) or, when the flip tears the
    last record, that the job has not finished; partial=True then reads the
    committed shards, equal to the reference. The file is never changed."""
    values = tokens(30)
    out = tmp_path / "out"
    run_job(values, out)
    journal = out / "journal.jbj"
    whole = journal.read_bytes()
    reference = jb.read_output(out)
    last_record = (
        len(whole)
        - 16
        - len(json.dumps(journal_records(out)[-1], sort_keys=True, separators=(",", ":")).encode())
    )
    for at in range(len(whole)):
        damaged = bytearray(whole)
        damaged[at] ^= 0x20
        journal.write_bytes(bytes(damaged))
        if at < last_record:
            with pytest.raises(OSError, match="journal.jbj is damaged at byte .*record"):
                jb.read_output(out)
        else:  # The "done" record torn: the job reads as interrupted.
            with pytest.raises(ValueError, match="has not finished.*torn record"):
                jb.read_output(out)
            partial = jb.read_output(out, partial=True)
            np.testing.assert_array_equal(partial["example_index"], reference["example_index"])
        assert journal.read_bytes() == bytes(damaged), f"the reader changed byte {at}"
    journal.write_bytes(whole)


def test_a_corrupt_shard_is_reported_by_readers_and_redone_by_the_writer(tmp_path):
    """A flipped byte in shard 4 of 9: read_output names it and changes
    nothing (it used to cut shards 5-8 and the done record off the journal);
    the next run redoes shards 4-8 and reports them."""
    values = tokens(90)
    run_job(values, tmp_path / "reference")
    out = tmp_path / "out"
    run_job(values, out)
    assert len(list(out.glob("part-*.parquet"))) == 9
    shard = out / "part-000004.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    before = snapshot(out)
    with pytest.raises(OSError, match="part-000004.parquet \\(shard 4, journal record .*corrupt"):
        jb.read_output(out)
    with pytest.raises(OSError, match="part-000004.parquet"):
        jb.read_output(out, partial=True)
    assert snapshot(out) == before
    report = run_job(values, out)
    assert report.redone_shards == 5 and report.runs == 2
    for name in sorted(p.name for p in out.glob("part-*.parquet")):
        assert (out / name).read_bytes() == (tmp_path / "reference" / name).read_bytes()
    assert_matches_reference(jb.read_output(out), values)


@pytest.mark.parametrize("where", ["middle", "tail"])
def test_the_writer_repairs_a_damaged_journal_and_counts_what_it_drops(tmp_path, where, caplog):
    values = tokens(60)
    run_job(values, tmp_path / "reference")
    out = tmp_path / "out"
    run_job(values, out)
    journal = out / "journal.jbj"
    whole = bytearray(journal.read_bytes())
    if where == "middle":
        whole[len(whole) // 3] ^= 0x01
        journal.write_bytes(bytes(whole))
    else:
        journal.write_bytes(bytes(whole[:-5]))
    with caplog.at_level("WARNING", logger="jaxbatch"):
        report = run_job(values, out)
    assert "is damaged at byte" in caplog.text
    dropped = "drops 1 record;" if where == "tail" else "records; the work"
    assert dropped in caplog.text
    assert report.examples == 60 and report.runs >= 2
    for name in sorted(p.name for p in out.glob("part-*.parquet")):
        assert (out / name).read_bytes() == (tmp_path / "reference" / name).read_bytes()
    assert_matches_reference(jb.read_output(out), values)


def test_a_torn_first_record_starts_the_job_afresh_once(tmp_path, caplog):
    """A full disk or a power cut during the job's first append leaves its
    first record cut short; every re-run used to fail ("repair it (Truncate)
    before appending"). The writer cuts it, starts afresh exactly once, and
    the report says so; the output equals an uninterrupted run's."""
    values = tokens(30)
    run_job(values, tmp_path / "reference")
    first = (tmp_path / "reference" / "journal.jbj").read_bytes()
    first = first[: 16 + int.from_bytes(first[4:8], "little")]
    reference_shards = sorted((tmp_path / "reference").glob("part-*.parquet"))
    for cut in (1, 3, 4, 15, 16, 17, len(first) // 2, len(first) - 1):
        out = tmp_path / f"out-{cut}"
        out.mkdir()
        (out / "journal.jbj").write_bytes(first[:cut])
        with pytest.raises(ValueError, match="has not finished"):
            jb.read_output(out)  # A reader changes nothing: an interrupted job.
        assert (out / "journal.jbj").read_bytes() == first[:cut]
        caplog.clear()
        with caplog.at_level("WARNING", logger="jaxbatch"):
            report = run_job(values, out)
        assert "journal.jbj is damaged at byte 0 (record 0: a torn record" in caplog.text, cut
        assert report.runs == 1 and report.examples == 30
        assert [(r["byte"], r["record"], r["dropped"]) for r in report.repairs] == [(0, 0, 1)]
        assert "journal repaired: damaged at byte 0 (record 0: a torn record" in str(report)
        saved = json.loads((out / "report.json").read_text())
        assert saved["repairs"] == report.repairs
        assert [p.read_bytes() for p in sorted(out.glob("part-*.parquet"))] == [
            p.read_bytes() for p in reference_shards
        ]
        assert_matches_reference(jb.read_output(out), values)
        again = run_job(values, out)  # Complete: nothing is cut or run again.
        assert again.runs == 1 and again.repairs == report.repairs


# -- Running jobs, changed settings, parts of other jobs ---------------------------


def test_a_running_job_reads_partially_without_waiting(tmp_path):
    values = tokens(30)
    out = tmp_path / "out"
    run_job(values, out)
    records = journal_records(out)
    with open(out / "journal.jbj", "r+b") as f:  # Back to before the job's "done".
        f.truncate(sum(16 + len(json.dumps(r, sort_keys=True, separators=(",", ":")).encode())
                       for r in records[:-1]))  # fmt: skip
    writer = _core.Journal(str(out / "journal.jbj"))  # Held, as a running job holds it.
    try:
        partial = jb.read_output(out, partial=True)
        np.testing.assert_array_equal(partial["example_index"], np.arange(30))
        with pytest.raises(ValueError, match="has not finished"):
            jb.read_output(out)
    finally:
        writer.close()


def test_a_failed_planning_run_locks_nothing_in(tmp_path):
    """`--token-budget 100` below the longest example fails while planning;
    its error names the least budget that fits, and the corrected re-run
    starts instead of being refused for a different setting."""
    values = [np.arange(n, dtype=np.int32) for n in (5, 300, 7, 1024, 20)]
    source = write_parquet(tmp_path / "in.parquet", values)
    out = tmp_path / "out"

    def cli(budget):
        return subprocess.run(
            [sys.executable, "-m", "jaxbatch", "run", f"{FUNCTIONS}:summarise", "--input",
             str(source), "--output", str(out), "--token-budget", str(budget), "--no-progress"],
            capture_output=True, text=True, timeout=TIMEOUT_S,
        )  # fmt: skip

    failed = cli(100)
    assert failed.returncode == 2
    assert "longest example (example 3, length 1024); raise token_budget to at least 1024" in (
        failed.stderr
    )
    done = cli(1024)
    assert done.returncode == 0, done.stderr
    assert_matches_reference(jb.read_output(out), values)


def test_on_error_and_checkpoint_every_are_keyed_on(tmp_path):
    values = tokens(20)
    run_job(values, tmp_path / "out")
    with pytest.raises(jb.JobError, match="option on_error: was 'raise', now 'skip'"):
        run_job(values, tmp_path / "out", on_error="skip")
    with pytest.raises(jb.JobError, match="option checkpoint_every: was 10, now 5"):
        run_job(values, tmp_path / "out", checkpoint_every=5)


def test_parts_of_different_jobs_are_not_merged(tmp_path):
    """Two processes' parts computed from other values (same lengths) are
    refused instead of silently merged."""
    values = tokens(40)
    other = [t + 1 for t in values]
    for index, data in ((0, values), (1, other)):
        run_job(data, tmp_path / "out", shard=(index, 2))
    with pytest.raises(ValueError, match="mixes parts of different jobs: .*input"):
        jb.read_output(tmp_path / "out")


# -- Ctrl-C --------------------------------------------------------------------------


# `python -m jaxbatch ...` once the interpreter is up: says so on stderr first.
_UP_THEN_CLI = (
    "import sys; print('up', file=sys.stderr, flush=True); "
    "import runpy; runpy.run_module('jaxbatch', run_name='__main__', alter_sys=True)"
)


def test_ctrl_c_at_any_moment_stops_the_run(tmp_path):
    """SIGINT at any moment, from the first tenth of a second (while jax
    loads, when the garbage collector's callbacks used to swallow it) to the
    middle of the work, ends `jaxbatch run` as interrupted: never exit 0 with
    the job complete, never another signal. The moments count from the end
    of the interpreter's own start-up (the child says when it is up, then
    runs the CLI as ``-m jaxbatch`` would): a SIGINT inside that start-up,
    which a loaded machine stretches past 0.1 s, is CPython's to handle
    (a fatal error naming whichever init step it hit), not jaxbatch's."""
    source = write_parquet(tmp_path / "in.parquet", tokens(150000, seed=3))  # Runs ~4 s.
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    interrupted = 0
    for delay in (0.1, 0.4, 0.8, 1.5, 2.5):
        out = tmp_path / f"out-{delay}"
        # The child inherits SIGINT ignored when the suite itself runs as a
        # background job (`make test &`: the shell ignores SIGINT for it), and
        # Python then never raises KeyboardInterrupt, so a signal before
        # jaxbatch's own handler was lost. A caught SIGINT here is reset to
        # the default in the child, as at a terminal.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", _UP_THEN_CLI, "run", f"{FUNCTIONS}:summarise", "--input",
                 str(source), "--output", str(out), "--batch-size", "16", "--no-progress"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            )  # fmt: skip
        finally:
            signal.signal(signal.SIGINT, previous)
        ready, _, _ = select.select([process.stderr], [], [], TIMEOUT_S)
        assert ready and process.stderr.readline() == "up\n", "the interpreter did not start"
        time.sleep(delay)
        if process.poll() is not None:  # Finished first (a fast machine): nothing to stop.
            assert process.returncode == 0, process.communicate()[1]
            continue
        process.send_signal(signal.SIGINT)
        interrupted += 1
        try:
            _, stderr = process.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"SIGINT at {delay} s: still running after {TIMEOUT_S} s")
        # 130: jaxbatch caught it; -SIGINT: Python's own default (before
        # jaxbatch started, or while it imported jax), the same to a shell.
        assert process.returncode in (130, -signal.SIGINT), (delay, process.returncode, stderr)
        if process.returncode == 130:
            assert "interrupted; re-run the same command to resume" in stderr, stderr
    assert interrupted >= 3, "the job ended before most signals: make it longer"


def test_a_partial_or_an_object_keys_a_resumable_job(tmp_path):
    """A factory's callable object or functools.partial used to be keyed by
    its repr (a memory address), so the job could never resume; now it is
    keyed by code and arguments, and what cannot be keyed asks for tag=."""
    script = tmp_path / "factory.py"
    script.write_text(textwrap.dedent("""
        import functools
        import jax.numpy as jnp
        import numpy as np

        def scaled(example, scale):
            return {"total": jnp.where(example["tokens_mask"], example["tokens"], 0).sum() * scale}

        class Model:
            def __init__(self):
                self.weights = np.arange(3.0)

            def __call__(self, example):
                return {"total": jnp.where(example["tokens_mask"], example["tokens"], 0).sum()}

        def make_partial():
            return functools.partial(scaled, scale=np.float32(2))

        def make_model():
            return Model()
    """))  # fmt: skip
    source = write_parquet(tmp_path / "in.parquet", tokens(30))
    for factory in ("make_partial()", "make_model()"):
        args = [sys.executable, "-m", "jaxbatch", "run", f"{script}:{factory}", "--input",
                str(source), "--output", str(tmp_path / factory), "--checkpoint-every", "10",
                "--no-progress"]  # fmt: skip
        for _ in range(2):  # The second run, in another process, finds the job complete.
            done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S)
            assert done.returncode == 0, done.stderr
        assert len(jb.read_output(tmp_path / factory)["example_index"]) == 30

    class Opaque:
        pass

    import functools

    opaque = functools.partial(lambda example, thing: example["tokens"].sum(), thing=Opaque())
    ds = jb.Dataset.from_arrays({"tokens": tokens(5)})
    with pytest.raises(jb.JobError, match="pass tag="):
        jb.run(opaque, ds, tmp_path / "opaque", progress=False)
    report = jb.run(opaque, ds, tmp_path / "opaque", progress=False, tag="v1")
    assert report.examples == 5

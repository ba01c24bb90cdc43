"""Killing a job at random moments, for the tests that resume one: jb.run's
(test_job.py, test_graph_jobs.py) and jb.tokenize's (test_tokenize.py).
Each starts the job in a subprocess again and again and kills it with
SIGKILL (no cleanup, as a crash or an OOM killer would) once its journal
shows progress, then checks the resumed output against an uninterrupted
run's: `shard_bytes` of both folders."""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from jaxbatch._src.job import folder as job_folder

# How long a started job may take to show progress before it is killed anyway.
PATIENCE_S = 120


def cli(command: str, *args: str) -> subprocess.Popen:
    """`jaxbatch COMMAND ARGS...` in a subprocess."""
    return subprocess.Popen(
        [sys.executable, "-m", "jaxbatch", command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_at_random_moments(
    start: Callable[[], subprocess.Popen],
    journal: Path,
    *,
    kills: int,
    seed: int,
    grown: int = 2000,
    pause: float = 0.3,
) -> list[int]:
    """Starts the job (``start()``) until it was killed `kills` times or
    finished: each time, once its journal grew by `grown` bytes, it is
    killed after a random pause of up to `pause` s. Returns the journal's
    size after each kill (their count is the kills made)."""
    rng = random.Random(seed)
    sizes: list[int] = []
    while len(sizes) < kills:
        size = journal.stat().st_size if journal.exists() else 0
        proc = start()
        deadline = time.monotonic() + PATIENCE_S
        # Wait for the job to make progress, then kill it at a random moment.
        while proc.poll() is None and time.monotonic() < deadline:
            if journal.exists() and journal.stat().st_size > size + grown:
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0, pause))
        if proc.poll() is not None:
            _, err = proc.communicate()
            assert proc.returncode == 0, err  # Finished before the kill: too little work.
            break
        proc.send_signal(signal.SIGKILL)
        if proc.wait() == 0:
            break  # It finished between the poll and the kill.
        sizes.append(journal.stat().st_size)
    return sizes


def finish(proc: subprocess.Popen, timeout: float = 300) -> None:
    """Waits for the last run, which must succeed."""
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err


def shard_bytes(folder: Path) -> dict[str, bytes]:
    """A job's shards by name: equal for equal outputs, byte for byte."""
    return {p.name: p.read_bytes() for p in sorted(folder.glob("part-*.parquet"))}


class Stopped(Exception):
    """A job stopped in this process by stop_after_shards."""


@contextlib.contextmanager
def stop_after_shards(count: int) -> Iterator[list[dict]]:
    """Within it, a job run in this process commits `count` shards and then
    raises Stopped where it would commit the next (after writing its file:
    as a crash between the write and the commit). Yields the shard records
    committed."""
    real_append, committed = job_folder.Journal.append, []

    def append(self, record):
        if record["kind"] == "shard":
            if len(committed) == count:
                raise Stopped
            committed.append(record)
        real_append(self, record)

    job_folder.Journal.append = append
    try:
        yield committed
    finally:
        job_folder.Journal.append = real_append

"""Loader states and job folders written by an older jaxbatch (0.1.0 at
commit 2eda9c9; tests/data/compat/make_fixtures.py) still restore, resume
and read: a user upgrading mid-run loses nothing."""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from job_functions import summarise, summarise_reference

import jaxbatch as jb

COMPAT = Path(__file__).parent / "data" / "compat"


def values() -> list[np.ndarray]:
    column = pq.read_table(COMPAT / "input.parquet").column("tokens").to_pylist()
    return [np.asarray(v, dtype=np.int32) for v in column]


def assert_matches_reference(out: dict) -> None:
    tokens = values()
    np.testing.assert_array_equal(out["example_index"], np.arange(len(tokens)))
    for row, t in enumerate(tokens):
        ref = summarise_reference(t)
        np.testing.assert_allclose(out["total"][row], ref["total"], rtol=1e-6)
        np.testing.assert_allclose(out["moments"][row], ref["moments"], rtol=1e-5)
        np.testing.assert_array_equal(out["doubled"][row], ref["doubled"])


def run_again(folder: Path):
    return jb.run(summarise, str(COMPAT / "input.parquet"), folder, planner=jb.PadToMax(5),
                  checkpoint_every=10, column="tokens", progress=False)  # fmt: skip


def test_an_old_finished_job_reads_and_is_found_complete(tmp_path):
    assert_matches_reference(jb.read_output(COMPAT / "job-finished"))
    folder = tmp_path / "job"
    shutil.copytree(COMPAT / "job-finished", folder)
    before = {p.name: p.read_bytes() for p in folder.glob("part-*.parquet")}
    report = run_again(folder)
    assert report.complete and report.runs == 1 and report.examples == 50
    assert {p.name: p.read_bytes() for p in folder.glob("part-*.parquet")} == before


def test_an_old_interrupted_job_resumes(tmp_path):
    """Killed after its third shard's write, before the record: the new
    code takes the unrecorded shard as the old job's (format 1 named shards
    only once written), redoes it and finishes."""
    folder = tmp_path / "job"
    shutil.copytree(COMPAT / "job-interrupted", folder)
    report = run_again(folder)
    assert report.complete and report.runs == 2 and report.examples == 50
    assert_matches_reference(jb.read_output(folder))


@pytest.mark.parametrize("name", ["pad_global", "auto_block", "pack_none", "auto_shard"])
def test_old_loader_states_restore_to_the_same_batches(name):
    sys.path.insert(0, str(COMPAT))
    from make_fixtures import LOADERS

    saved = json.loads((COMPAT / "loader_states.json").read_text())[name]
    planner, options = LOADERS[name]
    ds = jb.Dataset.from_arrow(pq.read_table(COMPAT / "input.parquet"))
    with jb.Loader(ds, planner, epochs=2, state=saved["state"], **options) as loader:
        following = [np.asarray(b["example_index"]).tolist() for b in loader]
    assert following == saved["following"]

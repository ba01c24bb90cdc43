"""Writes the compatibility fixtures in this folder with the jaxbatch that
runs it: a job folder finished, one interrupted (after two shards, with a
third shard written but not yet recorded, as a kill leaves it) and loader
states taken mid-epoch, each with the batches that follow it. They were
written by jaxbatch 0.1.0 at commit 2eda9c9 (before the job folder's format
2 and the engine's planner keys); tests/test_compat.py checks that every
later jaxbatch reads, resumes and restores them.

    python tests/data/compat/make_fixtures.py
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import jaxbatch as jb

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/, for job_functions
from job_functions import summarise  # noqa: E402

LOADERS = {
    "pad_global": (jb.PadToMax(4), dict(shuffle=True, seed=3)),
    "auto_block": (jb.AutoBuckets(3, token_budget=64), dict(shuffle="block", block_size=16)),
    "pack_none": (jb.Pack(32, 2), dict(shuffle=False)),
    "auto_shard": (jb.AutoBuckets(2, batch_size=4), dict(shuffle=True, shard=(1, 2))),
}


def tokens() -> list[list[int]]:
    rng = np.random.default_rng(20261203)
    return [rng.integers(0, 1000, rng.integers(1, 30)).tolist() for _ in range(50)]


def main() -> None:
    values = tokens()
    table = pa.table({"tokens": pa.array(values, pa.list_(pa.int32()))})
    pq.write_table(table, HERE / "input.parquet")
    for name in ("job-finished", "job-interrupted"):
        shutil.rmtree(HERE / name, ignore_errors=True)
    options = dict(planner=jb.PadToMax(5), checkpoint_every=10, column="tokens", progress=False)
    jb.run(summarise, str(HERE / "input.parquet"), HERE / "job-finished", **options)
    jb.run(summarise, str(HERE / "input.parquet"), HERE / "job-interrupted", **options)
    # As a kill after the third shard's write, before its record: the journal
    # ends after the second shard's record; shards 3 and 4 are gone but the
    # third's file.
    interrupted = HERE / "job-interrupted"
    from jaxbatch import _core

    journal = _core.Journal(str(interrupted / "journal.jbj"))
    records = [json.loads(r) for r in journal.records()]
    shards = [i for i, r in enumerate(records) if r["kind"] == "shard"]
    journal.truncate(shards[1] + 1)
    journal.close()
    for p in interrupted.glob("part-*.parquet"):
        if int(p.stem.split("-")[1]) > 2:
            p.unlink()
    (interrupted / "report.json").unlink()

    ds = jb.Dataset.from_arrow(table)
    states = {}
    for name, (planner, kwargs) in LOADERS.items():
        loader = jb.Loader(ds, planner, epochs=2, **kwargs)
        for _ in range(3):
            next(loader)
        state = loader.get_state()
        following = [np.asarray(b["example_index"]).tolist() for b in loader]
        states[name] = {"state": state, "following": following}
        loader.close()
    (HERE / "loader_states.json").write_text(json.dumps(states, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

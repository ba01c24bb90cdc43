"""A finished job's output folder as a source (data/job_output.py): a Loader,
jb.run and `jaxbatch plan` read it as they read a file, in example order
(jb.run's shards are in bucket order), equal to jb.read_output; an
unfinished, damaged or reshaped output is refused, naming it."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pyarrow.parquet as pq
import pytest
from job_functions import summarise
from test_job import dataset

import jaxbatch as jb
from jaxbatch._src.job import folder as job_folder


def test_a_run_output_reads_in_example_order_as_read_output_gives_it(tmp_path, monkeypatch):
    ds = dataset(120, seed=2)
    planner = jb.AutoBuckets(3, batch_size=8)  # Batches by length: shards out of order.

    class Crash(Exception):
        pass

    real_append = job_folder.Journal.append

    def crash_on_second_shard(self, record):
        if record["kind"] == "shard" and record["shard"] == 1:
            raise Crash
        real_append(self, record)

    monkeypatch.setattr(job_folder.Journal, "append", crash_on_second_shard)
    with pytest.raises(Crash):
        jb.run(summarise, ds, tmp_path / "out", planner=planner, checkpoint_every=30,
               progress=False)  # fmt: skip
    monkeypatch.setattr(job_folder.Journal, "append", real_append)
    with pytest.raises(ValueError, match="has not finished .* re-run it to finish"):
        jb.Loader(tmp_path / "out", jb.PadToMax(4))
    jb.run(summarise, ds, tmp_path / "out", planner=planner, checkpoint_every=30, progress=False)
    out = jb.read_output(tmp_path / "out")
    assert not (np.diff(np.concatenate(_shard_indices(tmp_path / "out"))) > 0).all()
    with jb.Loader(tmp_path / "out", jb.PadToMax(120), column="doubled", shuffle=False) as loader:
        (batch,) = list(loader)
    np.testing.assert_array_equal(batch["example_index"], np.arange(120))
    np.testing.assert_array_equal(batch["total"], out["total"])
    np.testing.assert_array_equal(batch["moments"], out["moments"])
    for row, doubled in enumerate(out["doubled"]):
        np.testing.assert_array_equal(batch["doubled"][row, : len(doubled)], doubled)
    # And it is a job's input as any file is.
    report = jb.run(lambda e: e["total"] * 2, tmp_path / "out", tmp_path / "twice",
                    column="doubled", progress=False)  # fmt: skip
    assert report.examples == 120
    np.testing.assert_allclose(jb.read_output(tmp_path / "twice")["output"], out["total"] * 2)


def _shard_indices(folder):
    return [pq.read_table(p)["example_index"].to_numpy() for p in sorted(folder.glob("part-*"))]


def test_reshaped_or_damaged_outputs_are_refused(tmp_path):
    ds = dataset(20)

    def outputs(e):
        return {"pair": jnp.ones((2, 3)) * e["tokens_lengths"], "half": e["tokens"] * 0}

    jb.run(outputs, ds, tmp_path / "out", planner=jb.PadToMax(8), progress=False)
    with pytest.raises(ValueError, match=r"output 'pair' .* shape \[2, 3\] .* jb.read_output"):
        jb.Loader(tmp_path / "out", jb.PadToMax(4))
    bf16 = jb.run(lambda e: e["tokens"].astype(jnp.bfloat16), ds, tmp_path / "bf16",
                  planner=jb.PadToMax(8), progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="dtype bfloat16"):
        jb.Loader(bf16.output, jb.PadToMax(4))
    shard = tmp_path / "bf16" / "part-000000.parquet"
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(OSError, match="truncated or torn"):
        jb.Loader(tmp_path / "bf16", jb.PadToMax(4))

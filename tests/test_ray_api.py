"""jaxbatch.ray without a cluster: what run refuses before it starts Ray
(nothing is made on disk), the folder rule that makes a job's unit files
its own, jb.run refusing a folder of a job run on Ray, and the Ray Data
stage called on blocks directly, against NumPy. (On a cluster, with
failures: tests/test_ray_job.py and tests/test_ray_data.py.)"""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow as pa
import pytest

import jaxbatch as jb
import jaxbatch.ray as jbr
from jaxbatch import _core
from jaxbatch._src.job.folder import JOURNAL_NAME, JobError, claim, reconcile, settle
from jaxbatch._src.job.job import KEYED, run_differences


def _tokens(n=200, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 100, k).astype(np.int32) for k in rng.integers(1, 30, n)]


def _total(ex):
    import jax.numpy as jnp

    return {"total": jnp.sum(jnp.where(ex["tokens_mask"], ex["tokens"], 0)), "t": ex["tokens"] + 1}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"workers": 0}, ValueError, "workers must be an int >= 1, found 0"),
        ({"max_retries": -1}, ValueError, "max_retries must be an int >= 0"),
        ({"checkpoint_every": 0}, ValueError, "checkpoint_every must be an int >= 1"),
        ({"planner": jb.GraphBudget(nodes=64, edges=64, graphs=4)}, ValueError, "GraphBudget"),
        ({"planner": "AutoBuckets"}, TypeError, "planner must be a jaxbatch planner"),
    ],
)
def test_run_refuses_before_starting_anything(tmp_path, kwargs, error, message):
    ds = jb.Dataset.from_arrays({"tokens": _tokens(10)})
    with pytest.raises(error, match=message):
        jbr.run(_total, ds, tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


def test_run_refuses_a_mixture_naming_what_takes_one(tmp_path):
    ds = jb.Dataset.from_arrays({"tokens": _tokens(10)})
    mixture = jb.Dataset.mix({"a": ds, "b": ds[:4]})
    with pytest.raises(TypeError, match=r"jaxbatch.ray.run: does not take a mixture; jb.run"):
        jbr.run(_total, mixture, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_run_without_ray_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    ds = jb.Dataset.from_arrays({"tokens": _tokens(10)})
    with pytest.raises(ImportError, match=r"jaxbatch.ray.run needs ray.*jaxbatch\[ray\]"):
        jbr.run(_total, ds, tmp_path / "out")


def _journal_with(folder, *records):
    folder.mkdir()
    journal = _core.Journal(str(folder / JOURNAL_NAME), _core.JournalAccess.write)
    for record in records:
        journal.append(json.dumps(record).encode())
    journal.close()


def test_a_job_in_units_owns_its_units_files_and_no_others(tmp_path):
    """The job record's unit count makes part-<u>.parquet the job's for every
    unit u (a worker may write it before the driver records it); a file past
    the last unit is someone else's and is refused, never deleted."""
    out = tmp_path / "out"
    _journal_with(out, {"kind": "job", "fingerprint": {"format": 3}, "units": 3})
    (out / "part-000001.parquet").write_bytes(b"PAR1 written by a worker, never recorded")
    (out / ".part-000002.parquet.tmp-77-0").write_bytes(b"PAR1 cut short")
    folder, journal = claim(out, overwrite=False, inputs=[])
    with journal:
        shards, done, redone = settle(folder, journal)
    assert (shards, done, redone) == ([], False, 0)
    assert sorted(p.name for p in out.iterdir()) == [JOURNAL_NAME]  # unrecorded: redone
    (out / "part-000003.parquet").write_bytes(b"PAR1 not a unit of this job")
    with pytest.raises(JobError, match="part-000003.parquet"):
        claim(out, overwrite=False, inputs=[])
    assert (out / "part-000003.parquet").exists()


def test_jb_run_refuses_to_resume_a_job_run_on_ray(tmp_path):
    ours = {
        "format": 3,
        "function": None,
        "function_source": None,
        "input": None,
        "examples": None,
        "options": {"tag": None},
    }
    recorded = {"kind": "job", "fingerprint": {**ours, "options": {"runner": "ray", "tag": None}}}
    out = tmp_path / "out"
    _journal_with(out, recorded, {"kind": "done", "time": 0.0})  # committed: not started over
    before = (out / JOURNAL_NAME).read_bytes()
    folder, journal = claim(out, overwrite=False, inputs=[])
    with journal:
        differences = run_differences(journal.records, ours, {"schema": None, "pad_value": 0})
        assert differences == ["option runner: was 'ray', now not given"]
        with pytest.raises(JobError, match="jb.run: .* different setting:\n  option runner"):
            reconcile(folder, journal, differences, KEYED)
    assert (out / JOURNAL_NAME).read_bytes() == before  # refused, nothing changed


# --- the Ray Data stage on blocks, without Ray --------------------------------


def test_stage_gives_one_row_per_input_row_against_numpy():
    tokens = _tokens(300, seed=3)
    ids = np.arange(300)
    check = lambda ex, out: out["total"] % 5 != 0  # noqa: E731
    planner = jb.FixedBuckets([8, 16, 24], batch_size=16, too_long="skip")
    stage = jbr.Stage(_total, planner, column="tokens", columns=["tokens"], check=check)
    for start in (0, 120):  # two blocks through one warm stage
        block = pa.table(
            {"id": ids[start : start + 120], "tokens": pa.array(tokens[start : start + 120])}
        )
        out = stage(block)
        assert out.column_names == [
            "id",
            "tokens",
            "t",  # the outputs' leaves, in pytree order
            "total",
            "jaxbatch_status",
            "jaxbatch_reason",
        ]
        assert out.column("id").to_pylist() == ids[start : start + 120].tolist()
        for row, i in enumerate(range(start, min(start + 120, 300))):
            status = out.column("jaxbatch_status")[row].as_py()
            total, t = out.column("total")[row].as_py(), out.column("t")[row].as_py()
            if len(tokens[i]) > 24:
                assert status == "skipped" and total is None and t is None
            elif tokens[i].sum() % 5 == 0:
                assert status == "quarantined" and total is None
                assert out.column("jaxbatch_reason")[row].as_py() == "check returned False"
            else:
                assert status == "ok" and total == tokens[i].sum()
                assert t == (tokens[i] + 1).tolist()
    assert stage.runner.stats.compilations <= 3  # one per bucket, kept across blocks


def test_stage_takes_numpy_blocks_and_marks_dropped_rows():
    tokens = _tokens(50, seed=4)
    block = {"tokens": np.array(tokens + [np.zeros(0, np.int32)], dtype=object)[:-1]}
    stage = jbr.Stage(_total, jb.PadToMax(16, remainder="drop"), keep_input=False)
    out = stage(block)
    status = out.column("jaxbatch_status").to_pylist()
    assert status == ["ok"] * 48 + ["dropped"] * 2
    assert out.column("total").to_pylist()[:48] == [int(t.sum()) for t in tokens[:48]]
    assert out.column_names == ["t", "total", "jaxbatch_status", "jaxbatch_reason"]


def test_stage_refuses_an_output_named_like_an_input_column():
    stage = jbr.Stage(lambda ex: {"tokens": ex["tokens"]}, jb.PadToMax(8))
    with pytest.raises(ValueError, match="the output 'tokens' has the name of an input column"):
        stage(pa.table({"tokens": pa.array(_tokens(10))}))


def test_a_worker_the_cluster_cannot_hold_is_refused_not_waited_for():
    """Ray waits forever for resources no node has; the job says so."""
    from jaxbatch._src.integrations.ray import _refuse_infeasible

    class Cluster:
        def cluster_resources(self):
            return {"CPU": 8.0, "memory": 1e9}

    _refuse_infeasible(Cluster(), 2, 0, None)
    with pytest.raises(
        ValueError, match=r"asks for \{'GPU': 1\}, but the cluster has \{'GPU': 0\}"
    ):
        _refuse_infeasible(Cluster(), 1, 1, None)
    with pytest.raises(ValueError, match="'TPU': 4"):
        _refuse_infeasible(Cluster(), 1, 0, {"TPU": 4})

"""jb.run and jb.map over a mixture: one pass of its stream, drawn as a
Loader with the same seed draws it, each draw processed once, checked
against the Loader's draws with the function applied in NumPy; killed and
resumed; refused when resumed with other weights or another seed; the
report's and stats' shares against counts from the output."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from job_functions import summarise, summarise_reference
from kill_resume import finish, kill_at_random_moments, shard_bytes
from mixture_job_functions import mixture, run_job

import jaxbatch as jb
from jaxbatch._src.job.folder import JobError


def loader_draws(mix, seed: int) -> list[tuple[int, int]]:
    """(source, example) of every draw a Loader with `seed` yields, in
    order: one PadToMax batch a block keeps the block's draw order."""
    draws = []
    with jb.Loader(mix, jb.PadToMax(batch_size=mix.block_size), seed=seed, epochs=1) as loader:
        for batch in loader:
            kept = np.asarray(batch["example_index"]) >= 0
            sources = np.asarray(batch["source_index"])[kept]
            draws += zip(
                sources.tolist(), np.asarray(batch["example_index"])[kept].tolist(), strict=True
            )
    return draws


def assert_rows_are_the_draws(out: dict, mix, draws: list[tuple[int, int]]) -> None:
    """Row p of the output is draw p, with `summarise` of its example."""
    np.testing.assert_array_equal(out["position"], np.arange(len(draws)))
    assert (
        list(zip(out["source_index"].tolist(), out["example_index"].tolist(), strict=True)) == draws
    )
    for row, (s, e) in enumerate(draws):
        ref = summarise_reference(mix.sources[s][e]["tokens"])
        np.testing.assert_allclose(out["total"][row], ref["total"], rtol=1e-6)
        np.testing.assert_allclose(out["moments"][row], ref["moments"], rtol=1e-5)
        np.testing.assert_array_equal(out["doubled"][row], ref["doubled"])


def assert_shares_count(shares: dict, mix, sources: np.ndarray, examples: np.ndarray) -> None:
    """Each source's examples and tokens, as counted from what was written."""
    assert list(shares) == mix.names
    lengths = np.array(
        [len(mix.sources[s][e]["tokens"]) for s, e in zip(sources, examples, strict=True)]
    )
    for k, name in enumerate(mix.names):
        n, t = int((sources == k).sum()), int(lengths[sources == k].sum())
        assert (shares[name].examples, shares[name].tokens) == (n, t), name
        assert shares[name].example_share == pytest.approx(n / len(sources))
        assert shares[name].token_share == pytest.approx(t / lengths.sum())


@pytest.mark.parametrize("exhaustion", ["restart", "stop", "drop"])
def test_run_writes_the_loaders_draws_in_order_with_the_reference_outputs(tmp_path, exhaustion):
    report = run_job(tmp_path, seed=5, exhaustion=exhaustion)
    mix = mixture(exhaustion=exhaustion)
    draws = loader_draws(mix, seed=5)
    out = jb.read_output(tmp_path)
    assert_rows_are_the_draws(out, mix, draws)
    if exhaustion == "restart":  # one pass: as many draws as examples; code runs out, repeats
        assert len(draws) == len(mix) and len(set(draws)) < len(draws)
    if exhaustion == "drop":  # every example once
        assert sorted(draws) == sorted(
            (s, e) for s, d in enumerate(mix.sources) for e in range(len(d))
        )
    assert report.examples == len(draws) and report.complete
    assert_shares_count(report.sources, mix, out["source_index"], out["example_index"])
    saved = json.loads((tmp_path / "report.json").read_text())["sources"]
    assert {n: s["tokens"] for n, s in saved.items()} == {
        n: s.tokens for n, s in report.sources.items()
    }
    assert "source 1 'code':" in str(report)


def test_map_gives_the_same_draws_outputs_and_shares():
    mix = mixture()
    draws = loader_draws(mix, seed=2)
    result = jb.map(summarise, mix, seed=2, planner=jb.FixedBuckets([32], batch_size=8))
    assert sorted(result.outputs) == list(range(len(draws)))
    assert (
        list(zip(result.source_index.tolist(), result.example_index.tolist(), strict=True)) == draws
    )
    for p, (s, e) in enumerate(draws):
        ref = summarise_reference(mix.sources[s][e]["tokens"])
        np.testing.assert_allclose(result.outputs[p]["total"], ref["total"], rtol=1e-6)
        np.testing.assert_array_equal(result.outputs[p]["doubled"], ref["doubled"])
    assert_shares_count(result.stats.sources, mix, result.source_index, result.example_index)
    with pytest.raises(ValueError, match="seed= drives a mixture's draws"):
        jb.map(summarise, mix.sources[0], seed=2)


def test_a_resume_with_other_weights_or_seed_is_refused_naming_it(tmp_path):
    run_job(tmp_path, seed=5)
    with pytest.raises(JobError, match=r"option seed: was 5, now 6"):
        run_job(tmp_path, seed=6)
    with pytest.raises(JobError, match=r"option mixture_weights: was \[\[0, \[0.5, 0.3, 0.2\]\]\]"):
        run_job(tmp_path, seed=5, weights={"web": 0.4, "code": 0.4, "math": 0.2})
    with pytest.raises(JobError, match=r"option mixture_exhaustion: was 'restart', now 'drop'"):
        run_job(tmp_path, seed=5, exhaustion="drop")
    assert run_job(tmp_path, seed=5).runs == 1  # The same job: complete, nothing redone.
    with pytest.raises(ValueError, match="seed= drives a mixture's draws"):
        jb.run(summarise, mixture().sources[0], tmp_path / "other", seed=1, progress=False)


@pytest.mark.timeout(600)
def test_kill_9_mid_run_then_resume_gives_the_uninterrupted_output(tmp_path):
    script = Path(__file__).parent / "mixture_job_functions.py"

    def start(out):
        return subprocess.Popen(
            [sys.executable, str(script), str(out), "7", "20"], stderr=subprocess.PIPE, text=True
        )

    run_job(tmp_path / "reference", seed=7, scale=20)
    job = tmp_path / "job"
    sizes = kill_at_random_moments(
        lambda: start(job), job / "journal.jbj", kills=2, seed=3, grown=1500, pause=0.2
    )
    assert len(sizes) >= 1  # Killed at least once.
    finish(start(job))
    assert shard_bytes(job) == shard_bytes(tmp_path / "reference")
    report = json.loads((job / "report.json").read_text())
    reference = json.loads((tmp_path / "reference" / "report.json").read_text())
    assert report["runs"] == len(sizes) + 1 and report["sources"] == reference["sources"]


def test_a_mixture_job_stopped_on_2_processes_finishes_on_3_with_elastic(tmp_path):
    """A mixture job's rows are keyed on draw positions (example_index
    repeats under "restart"): an elastic chain takes and splits positions,
    and read_output equals the uninterrupted job's, each draw once."""
    from kill_resume import Stopped, stop_after_shards

    reference = tmp_path / "reference"
    run_job(reference, seed=4, scale=2)
    out = tmp_path / "out"
    for i, stop in enumerate([1, None]):
        if stop is None:
            run_job(out, seed=4, scale=2, shard=(i, 2))
            continue
        with stop_after_shards(stop), pytest.raises(Stopped):
            run_job(out, seed=4, scale=2, shard=(i, 2))
    for j in range(3):
        run_job(out, seed=4, scale=2, shard=(j, 3), elastic=True)
    got, want = jb.read_output(out), jb.read_output(reference)
    assert set(got) == set(want)
    for key in want:
        if isinstance(want[key], list):
            assert len(got[key]) == len(want[key])
            for a, b in zip(got[key], want[key], strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-6)
        else:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-6)


def test_a_plain_jobs_output_named_position_is_an_output_not_the_key(tmp_path):
    """Only a mixture job's position column (marked when written) keys the
    rows; a plain job may name an output 'position' and is read in example
    order with it as an output, by read_output and as a Dataset."""
    data = jb.Dataset.from_arrays({"tokens": [np.arange(n, dtype=np.int32) for n in range(1, 9)]})

    def fun(example):
        return {"position": example["tokens"].sum() * 0 + 7, "total": example["tokens"].sum()}

    jb.run(fun, data, tmp_path, planner=jb.FixedBuckets([8], batch_size=3), progress=False)
    out = jb.read_output(tmp_path)
    np.testing.assert_array_equal(out["example_index"], np.arange(8))
    np.testing.assert_array_equal(out["position"], np.full(8, 7))
    np.testing.assert_array_equal(out["total"], [n * (n - 1) // 2 for n in range(1, 9)])
    from jaxbatch._src.data.job_output import job_output_table

    table = job_output_table(tmp_path, "test")  # What a Loader over the folder reads.
    assert table.column_names == ["position", "total"]
    np.testing.assert_array_equal(table.column("total").to_numpy(), out["total"])

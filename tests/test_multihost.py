"""The Loader under JAX's multi-controller runtime: 2 and 4 real
jax.distributed CPU processes on loopback (tests/multihost_worker.py), checked
against single-process runs of the same shards."""

import json
import sys
import time
from pathlib import Path

import multihost_worker as worker
import numpy as np
import pytest
from launch import launch_local

import jaxbatch as jb
from jaxbatch._src.plan.planners import planner_key

WORKER = str(Path(__file__).with_name("multihost_worker.py"))
TIMEOUT = 90


def run_processes(mode, out_dir, num_processes, local_devices=2, env=None):
    results = launch_local(
        [sys.executable, WORKER, mode, str(out_dir)],
        num_processes,
        local_devices=local_devices,
        timeout=TIMEOUT,
        env=env,
    )
    for r in results:
        assert r.returncode == 0, f"process {r.process_id} ({mode}): rc={r.returncode}\n{r.output}"
    return [json.loads((out_dir / f"{mode}-{i}.json").read_text()) for i in range(num_processes)]


@pytest.fixture(scope="module")
def trained_on_two(tmp_path_factory):
    """Two epochs of training on 2 processes x 2 devices, checkpointed at
    CHECKPOINT_STEP: the folder and each process's results."""
    out = tmp_path_factory.mktemp("train2")
    return out, run_processes("train", out, 2)


@pytest.fixture(scope="module")
def two_process_training(trained_on_two):
    """The training, then a restore of every process from the checkpoint."""
    out, trained = trained_on_two
    return trained, run_processes("resume", out, 2)


def reference_training(num_processes):
    """The same steps in this one process: the global batch is every shard's
    batch at that step, process 0's rows first."""
    step = worker.make_train_step()
    ds = worker.dataset()
    loaders = [
        jb.Loader(ds, worker.TRAIN_PLANNER, seed=5, shard=(i, num_processes), epochs=2)
        for i in range(num_processes)
    ]
    params, losses, shapes = worker.init_params(), [], []
    for parts in zip(*loaders, strict=True):
        batch = {k: np.concatenate([p[k] for p in parts]) for k in sorted(parts[0])}
        params, loss = step(params, batch)
        losses.append(float(loss))
        shapes.append({k: list(v.shape) for k, v in batch.items()})
    for loader in loaders:
        loader.close()
    return losses, shapes


def single_process_stream(planner, shuffle, shard, **kwargs):
    args = dict(shuffle=shuffle, block_size=32, seed=3, shard=shard, num_threads=1)
    with jb.Loader(worker.dataset(), planner, **args, **kwargs) as loader:
        return [worker.record(b) for b in loader]


def test_training_matches_a_single_process_run(two_process_training):
    (p0, p1), _ = two_process_training
    assert p0["count"] == p1["count"] == 2 and p0["devices"] == 4
    ref_losses, ref_shapes = reference_training(2)
    assert p0["shapes"] == p1["shapes"] == ref_shapes
    # Every process holds the same global loss, the one a single process gets.
    np.testing.assert_allclose(p0["losses"], ref_losses, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(p1["losses"], ref_losses, rtol=2e-5, atol=1e-6)
    assert ref_losses[-1] < ref_losses[0] / 4  # it trained


def test_restore_of_every_process_resumes_exactly(two_process_training):
    trained, resumed = two_process_training
    k = worker.CHECKPOINT_STEP
    for before, after in zip(trained, resumed, strict=True):
        assert after["shapes"] == before["shapes"][k:]
        np.testing.assert_allclose(after["losses"], before["losses"][k:], rtol=1e-6)


def test_per_example_outputs_go_back_to_their_process(two_process_training):
    (p0, p1), _ = two_process_training
    ds = worker.dataset()
    seen = {}
    for i, p in enumerate((p0, p1)):
        outputs = {int(e): v for e, v in p["outputs"].items()}
        with jb.Loader(ds, worker.TRAIN_PLANNER, seed=5, shard=(i, 2), epochs=2) as loader:
            mine = [int(e) for b in loader for e in b["example_index"] if e >= 0]
        # Exactly the examples this process's shard loaded, as often.
        assert {e: len(v) for e, v in outputs.items()} == {e: mine.count(e) for e in set(mine)}
        for e, values in outputs.items():
            seen[e] = seen.get(e, 0) + len(values)
            expected = ds.example(e)["tokens"].astype(np.float64).mean()
            np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-6)
    assert seen == {e: 2 for e in range(worker.NUM_EXAMPLES)}  # once per epoch


def test_a_checkpoint_of_two_processes_resumes_on_three(trained_on_two):
    """Elastic resume on real processes: 3 continue the global stream 2 had
    checkpointed, every example left in it once, one global shape per step."""
    out, _ = trained_on_two
    results = run_processes("elastic", out, 3, env={"SAVED_ON": "2"})
    assert [r["shard"] for r in results] == [[0, 3], [1, 3], [2, 3]]
    assert results[0]["shapes"] == results[1]["shapes"] == results[2]["shapes"]
    ds = worker.dataset()
    left = []
    for i in range(2):
        with jb.Loader(ds, worker.TRAIN_PLANNER, seed=5, shard=(i, 2), epochs=2) as loader:
            for step, batch in enumerate(loader):
                if step >= worker.CHECKPOINT_STEP:
                    left.extend(int(e) for e in batch["example_index"] if e >= 0)
    assert sorted(e for r in results for e in r["examples"]) == sorted(left)


def test_four_processes_train_like_one(tmp_path):
    results = run_processes("train", tmp_path, 4, local_devices=1)
    ref_losses, ref_shapes = reference_training(4)
    for r in results:
        assert r["count"] == 4 and r["devices"] == 4
        assert r["shapes"] == ref_shapes
        np.testing.assert_allclose(r["losses"], ref_losses, rtol=2e-5, atol=1e-6)


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    """Every planner x shuffle mode's batches on each of 2 processes."""
    return run_processes("streams", tmp_path_factory.mktemp("streams"), 2)


@pytest.mark.parametrize("planner", sorted(worker.PLANNERS))
@pytest.mark.parametrize("shuffle", worker.SHUFFLES, ids=str)
def test_shards_agree_on_steps_and_shapes(streams, planner, shuffle):
    key = f"{planner}/{shuffle}"
    s0, s1 = (p[key] for p in streams)
    # Each process's stream is the single-process Loader's for its shard.
    for i, s in enumerate((s0, s1)):
        assert s["stream"] == single_process_stream(
            worker.PLANNERS[planner], shuffle, (i, 2), epochs=2
        )
    # Same number of steps, same shapes and epoch at every step.
    assert len(s0["stream"]) == len(s1["stream"]) > 0
    for a, b in zip(s0["stream"], s1["stream"], strict=True):
        assert (a["shapes"], a["epoch"]) == (b["shapes"], b["epoch"])
    # Every example exactly once per epoch across processes (or, with
    # remainder="drop", at most once).
    n = worker.NUM_EXAMPLES
    for epoch in (0, 1):
        seen = [e for s in (s0, s1) for b in s["stream"] if b["epoch"] == epoch
                for e in b["examples"]]  # fmt: skip
        assert len(seen) == len(set(seen))
        if worker.PLANNERS[planner].remainder == "pad":
            assert sorted(seen) == list(range(n))
        else:
            assert set(seen) <= set(range(n)) and len(seen) > n // 2
    # Restored after 3 batches: exactly the rest; forever: the same epochs,
    # then more steps still alike on both processes.
    for s in (s0, s1):
        assert s["resumed"] == s["stream"][3:]
        assert s["forever"][: len(s["stream"])] == s["stream"]
    tail = len(s0["stream"])
    for a, b in zip(s0["forever"][tail:], s1["forever"][tail:], strict=True):
        assert a["shapes"] == b["shapes"] and a["epoch"] == b["epoch"] == 2


def test_a_job_on_every_process_writes_each_example_once(streams):
    """jb.run(shard="jax") on 2 jax.distributed processes: each writes its own
    part; read together they hold every example once, equal to the reference."""
    assert sum(p["job"]["examples"] for p in streams) == worker.NUM_EXAMPLES
    out = jb.read_output(Path(streams[0]["job"]["out_dir"]) / "job")
    ds = worker.dataset()
    assert sorted(out["example_index"].tolist()) == list(range(worker.NUM_EXAMPLES))
    for e, value in zip(out["example_index"].tolist(), out["output"].tolist(), strict=True):
        expected = ds.example(e)["tokens"].astype(np.float64).mean()
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)


def test_jb_map_over_a_shard_returns_that_process_examples(streams):
    ds = worker.dataset()
    seen = set()
    for i, p in enumerate(streams):
        with jb.Loader(ds, worker.TRAIN_PLANNER, shard=(i, 2), seed=5) as loader:
            mine = {int(e) for b in loader for e in b["example_index"] if e >= 0}
        outputs = {int(e): v for e, v in p["map"].items()}
        assert set(outputs) == mine and not seen & mine
        seen |= mine
        for e, v in outputs.items():
            np.testing.assert_allclose(v, ds.example(e)["tokens"].mean(), rtol=1e-5, atol=1e-6)
    assert seen == set(range(worker.NUM_EXAMPLES))


def fingerprint(ds):
    with jb.Loader(ds, worker.MISMATCH_PLANNERS[0]) as loader:
        return loader.get_state()["fingerprint"]


def expected_error(kind):
    """The start of the error both processes raise for a mismatch kind."""
    if kind == "global_batches_unsharded":
        return "global_batches: every Loader has shard=(index, 1) but there are 2 processes"
    if kind == "global_batches_same_shard":
        return "global_batches: processes 0-1 have shard 0, so no process loads shard 1"
    n = worker.NUM_EXAMPLES
    other_data = worker.dataset(n + 1) if kind == "data" else worker.dataset(seed=8)
    p0, p1 = (planner_key(p) for p in worker.MISMATCH_PLANNERS)
    difference = {
        "data": f"data: process 0 has {n} examples (fingerprint {fingerprint(worker.dataset())}), "
        f"process 1 has {n + 1} examples (fingerprint {fingerprint(other_data)})",
        "seed": "seed: process 0 has 3, process 1 has 4",
        "planner": f"planner: process 0 has {p0}, process 1 has {p1}",
        "epochs": "epochs: process 0 has 2, process 1 has 1",
        "shuffle": "shuffle: process 0 has global, process 1 has block",
        "position": "position: process 0 has step 3 of epoch 0, process 1 has step 2 of epoch 0",
    }
    difference["lengths"] = difference["data"].replace(f"{n + 1} examples", f"{n} examples")
    difference["global_batches_seed"] = difference["seed"]
    caller = "global_batches" if kind.startswith("global_batches") else "Loader(shard='jax')"
    # What differs, and nothing else: the list of differences ends there.
    return f"{caller}: the processes were given different {difference[kind]}. Every process"


@pytest.fixture(scope="module")
def mismatches(tmp_path_factory):
    """2 processes building equal Loaders, then one per mismatch kind
    (worker.MISMATCH_KINDS), each differing on process 1 only: how each
    process ended, and the errors it recorded on the way."""
    out = tmp_path_factory.mktemp("mismatch")
    results = launch_local([sys.executable, WORKER, "mismatch", str(out)], 2, timeout=TIMEOUT)
    for r in results:
        path = out / f"mismatch-{r.process_id}.json"
        assert path.exists(), f"process {r.process_id}: rc={r.returncode}\n{r.output}"
    return results, [json.loads((out / f"mismatch-{i}.json").read_text()) for i in range(2)]


@pytest.mark.parametrize("kind", worker.MISMATCH_KINDS[:-1])
def test_processes_given_different_settings_raise_on_both(mismatches, kind):
    _, records = mismatches
    for process, record in enumerate(records):
        assert record[kind].startswith(expected_error(kind)), (process, record[kind])


def test_processes_given_different_data_both_exit_with_the_error(mismatches):
    """The last kind goes uncaught: both processes end with it, neither hangs."""
    results, _ = mismatches
    assert worker.MISMATCH_KINDS[-1] == "data"
    for r in results:
        assert not r.timed_out and r.returncode != 0, r.output
        assert f"ValueError: {expected_error('data')}" in r.output, r.output


def test_processes_given_equal_settings_load_as_before(mismatches):
    """Several equal Loaders in a row (each one round of agreement): each
    process's stream is its shard's, with the same steps and shapes on both."""
    _, records = mismatches
    for i, record in enumerate(records):
        args = dict(worker.mismatch_args("equal", i), shard=(i, 2))
        with jb.Loader(**args) as loader:
            expected = [worker.record(b) for b in loader]
        assert record["equal"] == record["equal_again"] == expected
    s0, s1 = (r["equal"] for r in records)
    assert [b["shapes"] for b in s0] == [b["shapes"] for b in s1] and len(s0) > 2


def test_a_process_that_never_builds_its_loader_is_named(tmp_path):
    """Process 1 builds no Loader: process 0 stops at the agreement's
    timeout, naming it, instead of waiting forever."""
    results = launch_local(
        [sys.executable, WORKER, "absent", str(tmp_path)], 2, timeout=TIMEOUT,
        env={"JAXBATCH_AGREE_TIMEOUT": "3"},
    )  # fmt: skip
    waited, absent = results
    assert not waited.timed_out and waited.returncode != 0, waited.output
    assert (
        "TimeoutError: Loader(shard='jax'): process 1 of 2 did not reach its shard='jax' "
        "Loader number 1 within 3 s" in waited.output
    ), waited.output
    assert absent.returncode == 0, absent.output


@pytest.mark.parametrize("dead", [1, 0], ids=["worker", "coordinator"])
def test_a_dead_process_fails_the_others_within_the_heartbeat(tmp_path, dead):
    start = time.monotonic()
    results = launch_local(
        [sys.executable, WORKER, "die", str(tmp_path)], 2, timeout=TIMEOUT, env={"DIE": str(dead)}
    )
    elapsed = time.monotonic() - start
    died, survivor = results[dead], results[1 - dead]
    assert died.returncode == 17, died.output
    # The survivor is stopped by JAX (heartbeat 5 s), not killed at our timeout.
    assert not survivor.timed_out and survivor.returncode != 0, survivor.output
    assert "another task died" in survivor.output, survivor.output
    assert elapsed < TIMEOUT / 2
    assert not list(tmp_path.glob("die-*.json"))


def test_launcher_kills_a_hung_process_and_reports_it():
    start = time.monotonic()
    (result,) = launch_local([sys.executable, "-c", "import time; time.sleep(60)"], 1, timeout=1)
    assert result.timed_out and result.returncode is None
    assert time.monotonic() - start < 10

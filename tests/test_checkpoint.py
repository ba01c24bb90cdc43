"""jaxbatch.checkpoint: a loader's position saved with the model in one Orbax
checkpoint and restored in place, checked against the uninterrupted run: in
a fresh process, after kill -9, and on 2 jax.distributed processes
(tests/checkpoint_worker.py runs the other processes)."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import checkpoint_worker as worker
import multihost_worker as model
import numpy as np
import orbax.checkpoint as ocp
import orbax.checkpoint.experimental.v1 as ocp_v1
import pytest
from launch import launch_local

import jaxbatch as jb
import jaxbatch.checkpoint as jbc
from jaxbatch._src.integrations import orbax as jbc_checkpoint
from jaxbatch._src.integrations import state_files

WORKER = str(Path(__file__).with_name("checkpoint_worker.py"))
TIMEOUT = 60  # seconds for any one subprocess (each takes a few)
EVERY, STOP, TOTAL = 3, 7, 11  # kill -9: checkpoints at 3 and 6, killed after 7


def run_worker(*args) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, WORKER, *map(str, args)], env=env, timeout=TIMEOUT,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(Path(args[2]).read_text())


def uninterrupted(steps: int) -> list[dict]:
    """Steps 1..`steps` of one run that is never stopped."""
    step_fn, it, params = model.make_train_step(), worker.batches(), model.init_params()
    out = []
    for i in range(steps):
        batch = next(it)
        params, loss = step_fn(params, batch)
        out.append(worker.record(i + 1, batch, loss))
    return out


def assert_same_steps(got: list[dict], expected: list[dict]) -> None:
    assert [s["step"] for s in got] == [s["step"] for s in expected]
    for g, e in zip(got, expected, strict=True):
        assert sorted(g["batch"]) == sorted(e["batch"])
        for key in e["batch"]:
            np.testing.assert_array_equal(np.asarray(g["batch"][key]), np.asarray(e["batch"][key]),
                                          err_msg=f"step {e['step']}: {key}")  # fmt: skip
    # The same jitted step on the same inputs: the same losses.
    np.testing.assert_allclose([s["loss"] for s in got], [s["loss"] for s in expected], rtol=1e-6)


def small_dataset(lengths):
    return jb.Dataset.from_arrays({"tokens": [np.arange(n, dtype=np.int32) for n in lengths]})


# -- orbax stays optional -------------------------------------------------------------

WITHOUT_ORBAX = """
import sys
import jaxbatch
assert not [m for m in sys.modules if m.split(".")[0] == "orbax"], "import jaxbatch loaded orbax"
sys.modules["orbax"] = None  # As if not installed.
try:
    import jaxbatch.checkpoint
except ImportError as e:
    print(e)
"""


def test_orbax_is_imported_by_jaxbatch_checkpoint_only():
    done = subprocess.run([sys.executable, "-c", WITHOUT_ORBAX], capture_output=True, text=True,
                          timeout=TIMEOUT, env=dict(os.environ, JAX_PLATFORMS="cpu"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "jaxbatch.checkpoint needs orbax-checkpoint, which is not installed: "
        "pip install 'jaxbatch[orbax]'"
    )


# -- the iterator's own state ------------------------------------------------------


def test_device_prefetcher_set_state_continues_after_the_saved_batch():
    ds = small_dataset(range(1, 60))
    with jb.Loader(ds, jb.PadToMax(4), seed=2, epochs=2) as loader:
        reference = [b["example_index"].copy() for b in loader]
    batches = jb.device_prefetch(jb.Loader(ds, jb.PadToMax(4), seed=2, epochs=2), size=3)
    assert isinstance(batches, jb.DevicePrefetcher)
    head = [np.asarray(next(batches)["example_index"]) for _ in range(5)]
    saved = batches.get_state()
    json.dumps(saved)  # JSON as it is
    for _ in range(4):
        next(batches)  # Read on, and the queue ahead with it.
    batches.set_state(saved)
    assert batches.get_state() == saved
    rest = [np.asarray(b["example_index"]) for b in batches]
    assert len(head) + len(rest) == len(reference)
    for got, expected in zip(head + rest, reference, strict=True):
        np.testing.assert_array_equal(got, expected)


# -- Orbax v0: CheckpointManager ------------------------------------------------------


def test_model_and_loader_in_one_save_restore_in_a_fresh_process(tmp_path):
    """params + loader in one CheckpointManager.save; a new process restores
    both and its next batches and losses are the uninterrupted run's."""
    k, more = 4, 3
    step_fn, it, params = model.make_train_step(), worker.batches(), model.init_params()
    for _ in range(k):
        params, _ = step_fn(params, next(it))
    manager = ocp.CheckpointManager(tmp_path / "ckpt")
    worker.save(manager, k, params, it)
    manager.close()
    expected = []
    for i in range(k, k + more):  # The uninterrupted run goes on.
        batch = next(it)
        params, loss = step_fn(params, batch)
        expected.append(worker.record(i + 1, batch, loss))
    resumed = run_worker("resume", tmp_path / "ckpt", tmp_path / "resumed.json", k + more)
    assert resumed["start"] == k
    assert_same_steps(resumed["steps"], expected)
    saved = json.loads((tmp_path / "ckpt" / str(k) / "loader" / "process_0-of-1.json").read_text())
    assert saved["batches"] == k  # The iterator's state, not the Loader's read-ahead one.


def test_kill_9_after_a_checkpoint_resumes_the_uninterrupted_run(tmp_path):
    ckpt, out = tmp_path / "ckpt", tmp_path / "trained.json"
    argv = [sys.executable, WORKER, "train", ckpt, out, str(EVERY), str(STOP)]
    with open(tmp_path / "train.log", "w") as log:
        trainer = subprocess.Popen(argv, env=dict(os.environ, JAX_PLATFORMS="cpu"), stdout=log,
                                   stderr=subprocess.STDOUT)  # fmt: skip
        try:
            deadline = time.monotonic() + TIMEOUT
            while not out.exists() and trainer.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            trainer.kill()  # SIGKILL: no exit handler, no flush, threads mid-prefetch.
            trainer.wait(timeout=10)
    assert out.exists(), (tmp_path / "train.log").read_text()
    assert trainer.returncode == -9
    assert sorted(int(p.name) for p in ckpt.iterdir() if p.name.isdigit()) == [3, 6]
    reference = uninterrupted(TOTAL)
    trained = json.loads(out.read_text())
    assert_same_steps(trained["steps"], reference[:STOP])
    resumed = run_worker("resume", ckpt, tmp_path / "resumed.json", TOTAL)
    assert resumed["start"] == 6  # The latest checkpoint; step 7 was lost with the process.
    assert_same_steps(resumed["steps"], reference[6:])


def test_a_plain_loader_saves_and_restores(tmp_path):
    ds = small_dataset(range(3, 40))
    with jb.Loader(ds, jb.PadToMax(3), seed=9, epochs=None) as loader:
        for _ in range(4):
            next(loader)
        manager = ocp.CheckpointManager(tmp_path)
        manager.save(4, args=ocp.args.Composite(loader=jbc.LoaderSave(loader)))
        manager.wait_until_finished()
        expected = next(loader)["example_index"].copy()
    with jb.Loader(ds, jb.PadToMax(3), seed=9, epochs=None) as fresh:
        restored = manager.restore(4, args=ocp.args.Composite(loader=jbc.LoaderRestore(fresh)))
        assert restored.loader is fresh
        np.testing.assert_array_equal(next(fresh)["example_index"], expected)
    manager.close()


def test_saving_a_loader_wrapped_by_a_prefetcher_is_refused(tmp_path):
    loader = jb.Loader(small_dataset(range(1, 30)), jb.PadToMax(4), epochs=None)
    batches = jb.device_prefetch(loader, size=2)
    next(batches)
    with pytest.raises(ValueError, match=r"LoaderSave: this Loader is read ahead by "
                       r"DevicePrefetcher\(size=2.*save that iterator instead"):  # fmt: skip
        jbc.LoaderSave(loader)
    assert isinstance(jbc.LoaderSave(batches).item, jb.DevicePrefetcher)  # The one to save.
    # Restoring into it would yield the batches queued before the restore first.
    ahead = r"LoaderRestore: .* read ahead by .* they would come before the restored stream"
    with pytest.raises(ValueError, match=ahead + "; restore that iterator"):
        jbc.LoaderRestore(loader)
    state = batches.get_state()
    with pytest.raises(ValueError, match=r"Loader.set_state: this Loader is read ahead"):
        loader.set_state(state)
    after = next(batches)["example_index"]
    batches.set_state(state)  # The iterator restores it, dropping what it read ahead.
    np.testing.assert_array_equal(next(batches)["example_index"], after)
    with pytest.raises(TypeError, match="LoaderSave: expected a jb.Loader .* found dict"):
        jbc.LoaderSave({"step": 1})
    with pytest.raises(TypeError, match="LoaderRestore: expected the jb.Loader .* found list"):
        jbc.LoaderRestore([])
    loader.close()


def test_restoring_into_a_loader_over_other_data_raises_the_engines_error(tmp_path):
    planner = jb.PadToMax(4)
    with jb.Loader(small_dataset(range(1, 30)), planner, seed=1) as loader:
        next(loader)
        manager = ocp.CheckpointManager(tmp_path)
        manager.save(1, args=ocp.args.Composite(loader=jbc.LoaderSave(loader)))
        manager.wait_until_finished()
    # As many examples, other lengths: another stream. The refused restore
    # leaves the loader, and an iterator prefetching it, as they were (on
    # main the Loader was left closed).
    with jb.Loader(small_dataset(range(2, 31)), planner, seed=1) as fresh:
        expected = [b["example_index"].tolist() for b in fresh]
    with jb.Loader(small_dataset(range(2, 31)), planner, seed=1) as other:
        next(other)
        with pytest.raises(ValueError, match=r"Loader: the state was saved for other data"):
            manager.restore(1, args=ocp.args.Composite(loader=jbc.LoaderRestore(other)))
        batches = jb.device_prefetch(other, size=2)
        got = [next(batches)["example_index"].tolist()]
        with pytest.raises(ValueError, match=r"Loader: the state was saved for other data"):
            manager.restore(1, args=ocp.args.Composite(loader=jbc.LoaderRestore(batches)))
        got += [np.asarray(b["example_index"]).tolist() for b in batches]
        assert got == expected[1:]
    with jb.Loader(small_dataset(range(1, 30)), jb.PadToMax(5), seed=1) as other:
        with pytest.raises(
            ValueError, match=r"Loader: the state was saved with planner PadToMax\(batch_size=4"
        ):
            manager.restore(1, args=ocp.args.Composite(loader=jbc.LoaderRestore(other)))
    manager.close()


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _loop(p: Path) -> None:
    os.symlink(p.with_name("other.json"), p)
    os.symlink(p, p.with_name("other.json"))


BAD_STATE_FILES = {
    # what the file is: (make it, what the message says it is)
    "fifo": (_fifo, "it is a FIFO (named pipe); expected a regular file of JSON"),
    "dev_zero": (lambda p: os.symlink("/dev/zero", p),
                 "it is a character device (a symlink to '/dev/zero')"),
    "loop": (_loop, "it is a symlink loop (to "),
    "folder": (lambda p: p.mkdir(), "it is a directory; expected a regular file of JSON"),
    "dangling": (lambda p: os.symlink(p.with_name("gone.json"), p),
                 "gone.json', which does not exist"),
    "deep": (lambda p: p.write_text("[" * 200_000 + "]" * 200_000),
             "its JSON is nested too deeply to read"),
    "huge": (lambda p: p.write_text(" " * (state_files.MAX_STATE_BYTES + 1) + "{}"),
             f"it holds more than MAX_STATE_BYTES = {2**20} bytes"),
    "not_a_dict": (lambda p: p.write_text("[1, 2]"), "expected a JSON object, found list"),
}  # fmt: skip


def saved_after_one_batch(ds, folder: Path):
    """A checkpoint of a loader over `ds` after one batch, its state file,
    and the batch it continues with."""
    with jb.Loader(ds, jb.PadToMax(4), seed=1) as loader:
        next(loader)
        manager = ocp.CheckpointManager(folder)
        manager.save(1, args=ocp.args.Composite(loader=jbc.LoaderSave(loader)))
        manager.wait_until_finished()
        expected = next(loader)["example_index"].copy()
    (path,) = folder.rglob("process_0-of-1.json")
    return manager, path, expected


@pytest.mark.timeout(60)  # A FIFO read without O_NONBLOCK would wait here for ever.
@pytest.mark.parametrize("kind", list(BAD_STATE_FILES))
def test_a_state_path_that_is_not_a_small_regular_json_file_is_named(tmp_path, kind):
    make, says = BAD_STATE_FILES[kind]
    ds = small_dataset(range(1, 30))
    manager, path, _ = saved_after_one_batch(ds, tmp_path / "ckpt")
    path.unlink()
    make(path)
    with jb.Loader(ds, jb.PadToMax(4), seed=1) as fresh:
        with pytest.raises(ValueError) as error:
            manager.restore(1, args=ocp.args.Composite(loader=jbc.LoaderRestore(fresh)))
    message = str(error.value)
    # What, where and what it is; never "expected X, found [X]".
    assert message.startswith(f"LoaderRestore: {path} is not a loader state: "), message
    assert says in message, message
    manager.close()


def test_a_state_file_behind_a_symlink_to_a_regular_file_restores(tmp_path):
    ds = small_dataset(range(1, 30))
    manager, path, expected = saved_after_one_batch(ds, tmp_path / "ckpt")
    path.rename(tmp_path / "real.json")
    os.symlink(tmp_path / "real.json", path)
    with jb.Loader(ds, jb.PadToMax(4), seed=1) as fresh:
        manager.restore(1, args=ocp.args.Composite(loader=jbc.LoaderRestore(fresh)))
        np.testing.assert_array_equal(next(fresh)["example_index"], expected)
    manager.close()


# -- 2 processes -------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """2 jax.distributed processes x 2 CPU devices train on global batches,
    saving at step 4 and going on to 7; 2 fresh ones restore and train to 7."""
    out = tmp_path_factory.mktemp("multi")
    runs = {}
    for mode, args in (("multi_train", [4, 7]), ("multi_resume", [7])):
        results = launch_local([sys.executable, WORKER, mode, str(out / "ckpt"), str(out / mode),
                                *map(str, args)], 2, timeout=TIMEOUT)  # fmt: skip
        for r in results:
            assert r.returncode == 0, f"process {r.process_id} ({mode}): {r.output[-3000:]}"
        runs[mode] = [json.loads((out / f"{mode}-{i}.json").read_text()) for i in range(2)]
    return out / "ckpt", runs


def test_two_processes_each_save_and_restore_their_own_shard(two_processes):
    ckpt, runs = two_processes
    files = sorted(p.name for p in (ckpt / "4" / "loader").glob("*.json"))
    assert files == ["process_0-of-2.json", "process_1-of-2.json"]
    for i in range(2):
        state = json.loads((ckpt / "4" / "loader" / f"process_{i}-of-2.json").read_text())
        assert state["shard"] == [i, 2] and state["batches"] == 4
        with jb.Loader(model.dataset(), model.TRAIN_PLANNER, seed=worker.SEED, epochs=None,
                       shard=(i, 2)) as shard:  # fmt: skip
            mine = [next(shard)["example_index"] for _ in range(7)]
        trained, resumed = runs["multi_train"][i], runs["multi_resume"][i]
        assert trained["process"] == resumed["process"] == i and resumed["start"] == 4
        # Each process's rows are its own shard's batches, before and after.
        for s, expected in zip(trained["steps"], mine, strict=True):
            np.testing.assert_array_equal(s["batch"]["example_index"], expected)
        assert_same_steps(resumed["steps"], trained["steps"][4:])
    # One global loss, the same on both processes.
    losses = [[s["loss"] for s in run["steps"]] for run in runs["multi_resume"]]
    assert losses[0] == losses[1]


def test_one_process_restoring_a_two_process_checkpoint_names_the_files(two_processes):
    ckpt, _ = two_processes
    batches = worker.batches()
    with pytest.raises(FileNotFoundError, match=r"no loader state for process 0 of 1: expected "
                       r".*process_0-of-1.json, found \['process_0-of-2.json', "
                       r"'process_1-of-2.json'\]"):  # fmt: skip
        ocp.CheckpointManager(ckpt).restore(
            4, args=ocp.args.Composite(loader=jbc.LoaderRestore(batches))
        )


def test_one_process_restores_a_two_process_checkpoint_elastically(two_processes, tmp_path):
    """LoaderRestore(elastic=True): the 2 processes' states on 1 process,
    which reads what both had left of the epoch, each example once."""
    ckpt, _ = two_processes
    ds, planner = model.dataset(), model.TRAIN_PLANNER
    with jb.Loader(ds, planner, seed=worker.SEED, epochs=None) as loader:
        ocp.CheckpointManager(ckpt).restore(
            4, args=ocp.args.Composite(loader=jbc.LoaderRestore(loader, elastic=True))
        )
        rest = [next(loader)["example_index"] for _ in range(loader.steps(0))]
    left = []
    for i in range(2):
        with jb.Loader(ds, planner, seed=worker.SEED, epochs=1, shard=(i, 2)) as shard:
            left += [e for step, b in enumerate(shard) if step >= 4 for e in b["example_index"]]
    assert sorted(e for b in rest for e in b if e >= 0) == sorted(e for e in left if e >= 0)
    # A process's file missing, or files of two process counts: named.
    lacking = tmp_path / "lacking"
    lacking.mkdir()
    shutil.copy(ckpt / "4" / "loader" / "process_0-of-2.json", lacking)
    with pytest.raises(FileNotFoundError, match=r"lacks the states of process\(es\) \[1\] of 2: "
                       r"expected \['process_1-of-2.json'\]"):  # fmt: skip
        jbc_checkpoint.restore_state(lacking, worker.batches(), "LoaderRestore", elastic=True)
    (lacking / "process_0-of-1.json").write_text("{}")
    with pytest.raises(ValueError, match=r"found states of \[1, 2\] processes"):
        jbc_checkpoint.restore_state(lacking, worker.batches(), "LoaderRestore", elastic=True)


# -- Orbax v1 -----------------------------------------------------------------------


def test_v1_stateful_checkpointable_saves_and_loads_in_place(tmp_path):
    step_fn, it, params = model.make_train_step(), worker.batches(), model.init_params()
    for _ in range(3):
        params, _ = step_fn(params, next(it))
    path = tmp_path / "ckpt"
    ocp_v1.save_checkpointables(path, {"params": params, "loader": jbc.Checkpointable(it)})
    expected = [next(it)["example_index"] for _ in range(2)]
    fresh = worker.batches()
    loaded = ocp_v1.load_checkpointables(
        path, {"params": None, "loader": jbc.Checkpointable(fresh)}
    )
    assert loaded["loader"].item is fresh
    for e in expected:
        np.testing.assert_array_equal(next(fresh)["example_index"], e)
    np.testing.assert_array_equal(loaded["params"]["w"], params["w"])

"""device_prefetch's checkpoint state and global batches in one process
(tests/test_multihost.py runs them across real jax.distributed processes)."""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import jaxbatch as jb


def make_dataset(n=60, seed=0):
    rng = np.random.default_rng(seed)
    tokens = [rng.integers(0, 100, k).astype(np.int32) for k in rng.integers(1, 30, n)]
    return jb.Dataset.from_arrays({"tokens": tokens})


def test_device_prefetch_state_resumes_after_the_last_yielded_batch():
    ds = make_dataset()
    planner = jb.AutoBuckets(3, batch_size=4)
    with jb.Loader(ds, planner, seed=2, epochs=2) as loader:
        reference = [np.asarray(b["example_index"]).tolist() for b in loader]
    loader = jb.Loader(ds, planner, seed=2, epochs=2)
    batches = jb.device_prefetch(loader, size=3)
    taken = [np.asarray(next(batches)["example_index"]).tolist() for _ in range(5)]
    state = batches.get_state()
    # The loader itself has been read ahead by the prefetch: its own state
    # would skip the batches in flight, so asking it is refused while the
    # prefetcher lives, and shows the skip once it is gone.
    refused = r"Loader.get_state: .* read ahead by DevicePrefetcher\(size=3.*on that iterator"
    with pytest.raises(ValueError, match=refused):
        loader.get_state()
    del batches
    assert loader.get_state()["step"] == state["step"] + 2
    loader.close()
    with jb.Loader(ds, planner, seed=2, epochs=2, state=state) as resumed:
        rest = [np.asarray(b["example_index"]).tolist() for b in resumed]
    assert taken + rest == reference


def test_global_batches_and_process_local_round_trip():
    ds = make_dataset()
    with jb.Loader(ds, jb.PadToMax(4), seed=1) as loader:
        host = [dict(b) for b in loader]
    with jb.Loader(ds, jb.PadToMax(4), seed=1) as loader:
        device = list(jb.global_batches(loader))
    assert len(device) == len(host)
    for h, d in zip(host, device, strict=True):
        assert d["tokens"].sharding.spec == jax.sharding.PartitionSpec("data")
        assert d["tokens"].shape == h["tokens"].shape  # one process: global = local
        local = jb.process_local(d)
        for k in h:
            np.testing.assert_array_equal(local[k], h[k])
    sums = jb.process_local(jax.jit(lambda b: b["tokens"].sum(1))(device[0]))
    np.testing.assert_array_equal(sums, host[0]["tokens"].sum(1))


def test_rows_that_do_not_split_among_local_devices_get_a_clear_error():
    code = (
        "import numpy as np, jaxbatch as jb\n"
        "ds = jb.Dataset.from_arrays({'tokens': [np.arange(n) for n in range(1, 20)]})\n"
        "with jb.Loader(ds, jb.PadToMax(3)) as loader:\n"
        "    next(jb.global_batches(loader))\n"
    )
    env = dict(
        os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2"
    )
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode != 0
    assert "cannot build the global array 'tokens' from this process's (3, 11) rows" in run.stderr
    assert "rows_multiple=jax.local_device_count() = 2" in run.stderr
    # The fix the message names works: a token budget's rows rounded to 2.
    fixed = code.replace("jb.PadToMax(3)", "jb.AutoBuckets(3, token_budget=45, rows_multiple=2)")
    fixed += "    print(sum(1 for _ in jb.global_batches(loader)))\n"
    run = subprocess.run([sys.executable, "-c", fixed], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_process_local_of_scalars_and_host_values():
    assert jb.process_local(jax.numpy.float32(3.5)) == 3.5
    np.testing.assert_array_equal(jb.process_local({"a": np.arange(3)})["a"], np.arange(3))

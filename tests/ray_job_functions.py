"""The job the Ray tests run (tests/test_ray_job.py, tests/ray_cluster_worker.py):
cheap and exact (integer tokens, float32 sums well inside 2^24), so the
failure handling, not compute, is what takes the time, and a single-process
jb.run is the reference value for value."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import jaxbatch as jb

EXAMPLES = 24_000
LONGEST = 24
CHECKPOINT_EVERY = 400  # 60 units
PLANNER = jb.AutoBuckets(4, batch_size=64)


def make_tokens(n: int = EXAMPLES, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, LONGEST + 1, n)
    return [rng.integers(0, 1000, k).astype(np.int32) for k in lengths]


def fun(example):
    tokens = jnp.where(example["tokens_mask"], example["tokens"], 0)
    return {"s": jnp.sum(tokens).astype(jnp.float32), "t": example["tokens"] * 2 + 1}


def check(example, out):
    """Quarantines about one example in 13: some in every unit."""
    return out["s"] % 13 != 0


def reference_sums(tokens: list[np.ndarray]) -> np.ndarray:
    return np.array([t.sum() for t in tokens], np.float32)


#: The job's keywords, for jb.run and jaxbatch.ray.run alike.
JOB = {
    "column": "tokens",
    "planner": PLANNER,
    "checkpoint_every": CHECKPOINT_EVERY,
    "check": check,
    "on_error": "quarantine",
    "progress": False,
}

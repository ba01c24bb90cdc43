"""A typed user program, as a JAX user writes one: tests/test_typing.py
checks it with mypy --strict (every jaxbatch name it touches must be typed,
not Any) and runs it."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jaxbatch as jb


def make_dataset(n: int = 64, seed: int = 0) -> jb.Dataset:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, n)
    return jb.Dataset.from_arrays(
        {
            "tokens": [rng.integers(0, 100, int(k)).astype(np.int32) for k in lengths],
            "label": rng.integers(0, 2, n).astype(np.int32),
        }
    )


def mean_embedding(example: dict[str, jax.Array]) -> jax.Array:
    """One example: the masked mean of its token values."""
    x = example["tokens"].astype(jnp.float32)
    return jb.masked.mean(x, example["tokens_mask"])


def main() -> dict[str, Any]:
    ds = make_dataset()
    planner: jb.AutoBuckets = jb.AutoBuckets(max_shapes=2, batch_size=8, remainder="pad")
    plan: jb.BatchPlan = jb.plan(ds, planner)
    batch: jb.Batch = jb.collate(ds, plan[0])
    per_example: dict[int, Any] = jb.unbatch(np.asarray(batch["tokens"]), batch)
    host_tokens: np.ndarray = batch["tokens"]
    budget: jb.GraphBudgetKwargs = {"nodes": 64, "edges": 128, "graphs": 8}
    graph_planners: list[jb.Planner] = [jb.GraphBudget(**budget), jb.GraphBuckets(3, **budget)]

    pack = jb.Pack(row_length=64, rows_per_batch=4, algorithm="best_fit")
    options = jb.LoaderOptions(shuffle="block", block_size=16, seed=1, epochs=1, on_error="skip")
    with jb.Loader(ds, pack, options=options) as loader:
        first: jb.Batch = next(iter(loader))
        state: dict[str, Any] = loader.get_state()
        steps: int = len(loader)
    with jb.Loader(ds, pack, options=options, state=state) as resumed:
        batches = jb.device_prefetch(resumed, size=2)
        on_device: list[jb.Batch[jax.Array]] = list(batches)  # a Batch, its arrays on device
        shapes = [b["tokens"].shape for b in on_device]
        position: dict[str, Any] = batches.get_state()  # after the last batch, to checkpoint
        stats: jb.LoaderStats = resumed.stats

    with jb.Loader(ds, planner, shuffle=False, epochs=1, num_threads=2) as in_order:
        result: jb.MapResult = jb.map(mean_embedding, in_order, on_oom="split")
    # Per-segment sums of a packed batch, and its attention mask.
    segment_ids = jnp.asarray(first["tokens_segment_ids"])
    sums = jb.masked.segment_sum(
        jnp.asarray(first["tokens"]), segment_ids, num_segments=first.shape.segments
    )
    attend: jax.Array = jb.masked.attention_mask(segment_ids, causal=True)
    means = np.stack([np.asarray(result.outputs[i]) for i in range(len(ds))])
    return {
        "plan": plan,
        "host_tokens": host_tokens,
        "graph_planners": graph_planners,
        "on_device": [b.index for b in on_device],
        "per_example": per_example,
        "first": first,
        "steps": steps,
        "efficiency": stats.efficiency,
        "shapes": shapes,
        "position": position,
        "means": means,
        "sums": np.asarray(sums),
        "attend": np.asarray(attend),
    }


if __name__ == "__main__":
    print(main()["plan"])

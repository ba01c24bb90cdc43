"""What a packed row of each length costs the demo's model, and so how much
choosing row lengths from the data can save at most.

bench_e2e measures `Pack` with two row lengths end to end (jaxbatch-pack2
against jaxbatch-pack). This benchmark explains its ratio. It times the
demo's jitted per-row MiniLM over real packed batches of the pydoc corpus at
three row lengths (256, the short length `Pack(max_shapes=2)` chooses, 64),
every shape once per repetition in turn, and fits the time per token as
``c + a x L``: ``c`` the work per token (projections, MLP), ``a x L`` the
attention a token pays in a row of L tokens. From the fit it prints:

* the share of a 256-token row's time that is attention;
* the batch-compute ratio over one row length of 256 for each plan of
  `Pack(max_shapes=k)` (k = 1..4) under the demo's token budget: its
  batches' token slots, each costing ``c + a x L`` at its row length;
* the bound no choice of row lengths can pass: every text in a row of its
  own length, with no padding at all.

The fitted model is checked against the measured time per batch of the
chosen short length (printed side by side).

Then attention alone (attention_rows.py): jaxbatch's packed attention (the
C++ kernel, and its masked XLA form) against the dense masked attention an
expert writes in jax.numpy, forward and forward+backward, over the corpus's
packed rows of 256 (MiniLM's 12 heads of 32) and over rows of one full
segment. Run::

    .venv/bin/python bench/bench_pack_rows.py [--reps N] [--quick] [--attention-only]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("JAXBATCH_MEMORY_PLAN_CACHE", "0")

import attention_rows  # noqa: E402
import harness  # noqa: E402
import numpy as np  # noqa: E402

SHORT = 64  # the shortest row length timed (with truncation: only its cost matters)


def _batches(model, dataset, budget: int):
    """{(rows, L): one device batch} for 256, the chosen short length and
    SHORT, with the per-row function every shape shares."""
    import bench_e2e
    import jax

    import jaxbatch as jb
    from jaxbatch._src.collate import keys

    planner, fun = bench_e2e.two_row_lengths(model, dataset, budget)
    length = model.config.max_seq_length
    one = jb.Pack(row_length=length, rows_per_batch=max(1, budget // length))
    segments = jb.plan(dataset, one).shapes[0].segments
    short = jb.Pack(
        row_length=SHORT,
        rows_per_batch=budget // SHORT,
        max_segments_per_row=segments,
        too_long="truncate",
    )
    names = ["input_ids", keys.segment_ids("input_ids"), keys.positions("input_ids")]
    batches = {}
    for p in (one, planner, short):
        for batch in jb.Loader(dataset, p):
            shape = batch["input_ids"].shape
            if shape not in batches:
                batches[shape] = {k: jax.device_put(batch[k]) for k in names}
    return planner, segments, jax.jit(jax.vmap(fun)), batches


def _fit(per_token: dict[int, float]) -> tuple[float, float]:
    """(c, a) of time per token = c + a x L, least squares over the lengths."""
    lengths = np.array(sorted(per_token), float)
    times = np.array([per_token[int(n)] for n in lengths])
    a, c = np.polyfit(lengths, times, 1)
    return float(c), float(a)


def _plan_cost(plan, c: float, a: float) -> float:
    return sum(s.shape.rows * s.shape.length * (c + a * s.shape.length) for s in plan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_arguments(parser, default_reps=5)
    parser.add_argument(
        "--attention-only", action="store_true", help="only the packed-attention table"
    )
    args = parser.parse_args(argv)
    env = harness.check_load(args.force)
    reps = harness.repetitions(args)

    import bench_e2e

    import jaxbatch as jb
    from jaxbatch._src.cli.demo.minilm import load_model

    model = load_model()
    texts = bench_e2e.corpus(300 if args.quick else None)
    dataset = jb.Dataset.from_arrays({"input_ids": model.tokenize(texts)})
    lengths = dataset.lengths("input_ids").astype(float)
    attention = attention_rows.compare(
        attention_rows.layouts(lengths, rows=4 if args.quick else 16), reps
    )
    print(f"bench_pack_rows: packed attention, {reps} reps; {harness.describe(env)}")
    print(harness.format_table(attention))
    if args.attention_only:
        return 0
    budget = 2048 if args.quick else 10496  # the demo's budget on this machine's memory
    planner, segments, step, batches = _batches(model, dataset, budget)
    for batch in batches.values():
        step(batch).block_until_ready()  # compile each shape before timing
    seconds: dict[tuple[int, int], list[float]] = {shape: [] for shape in batches}
    for _ in range(reps):
        for shape, batch in batches.items():
            t0 = time.perf_counter()
            step(batch).block_until_ready()
            seconds[shape].append(time.perf_counter() - t0)
    per_token = {s[1]: float(np.median(t)) / (s[0] * s[1]) for s, t in seconds.items()}
    c, a = _fit(per_token)

    full = max(per_token)
    one = jb.plan(dataset, jb.Pack(row_length=full, rows_per_batch=budget // full))
    base = _plan_cost(one, c, a)
    rows = [["shape (rows x L)", "s per batch", "us per token", "fit us per token"]]
    for shape, t in sorted(seconds.items(), key=lambda kv: -kv[0][1]):
        fitted = (c + a * shape[1]) * 1e6
        rows.append(
            [
                f"{shape[0]} x {shape[1]}",
                harness.spread(t),
                f"{per_token[shape[1]] * 1e6:.1f}",
                f"{fitted:.1f}",
            ]
        )
    print(
        f"bench_pack_rows: {len(texts)} texts, {int(lengths.sum())} tokens, token budget "
        f"{budget}, {reps} reps; {harness.describe(env)}"
    )
    print(harness.format_table(rows))
    print(
        f"time per token = {c * 1e6:.1f} us + {a * 1e6:.3f} us x L: attention is "
        f"{a * full / (c + a * full):.0%} of a {full}-token row's time"
    )
    plans = [["plan", "row lengths", "batches", "real tokens", "batch compute vs one length"]]
    for k in (1, 2, 3, 4):
        p = jb.Pack(
            row_length=full, max_shapes=k, token_budget=budget, max_segments_per_row=segments
        )
        plan = jb.plan(dataset, p)
        slots = sum(s.shape.rows * s.shape.length for s in plan)
        plans.append(
            [
                f"max_shapes={k}",
                "/".join(str(s.length) for s in plan.shapes),
                str(len(plan)),
                f"{lengths.sum() / slots:.1%}",
                f"{base / _plan_cost(plan, c, a):.3f}x",
            ]
        )
    bound = base / float((lengths * (c + a * lengths)).sum())
    plans.append(["bound", "each text its own", "-", "100%", f"{bound:.3f}x"])
    print(harness.format_table(plans))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

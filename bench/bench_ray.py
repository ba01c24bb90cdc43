"""Ray benchmark: one batch job over ragged examples, five ways.

  jb.run        jaxbatch in one process: AutoBuckets(8, batch_size=64), the C++
                loader, resumable Parquet output;
  ray-1, ray-2  jaxbatch.ray.run with 1 and 2 workers (actors of one CPU): the
                same plan, cut into work units, each committed once;
  ray-data-expert
                (expert) plain Ray Data: read_parquet (the corpus in 8 files),
                repartition(8) so both actors get blocks, then map_batches with a
                callable class holding jax.jit(jax.vmap(f)), 64 rows a batch
                padded to the batch's longest, an actor pool of 2; imports
                nothing from jaxbatch;
  ray-data-stage
                the same pipeline with jaxbatch.ray.Stage in place of the
                expert's class (blocks of BLOCK rows, each planned alone).

f is a small per-token MLP and a masked mean (the cost of a real embedder's
inner loop without its weights). Every run's outputs are checked against
jb.run's (rtol 1e-5). Reported: wall seconds (median of the repetitions, with
min-max), examples/s, compilations, padding efficiency (real over padded
tokens), and the Ray path's overhead over jb.run at one worker. Ray's own
start (ray.init) is outside the timings; each job's actors start inside them.

Also, without Ray: how the block size bounds a planner that sees one block at
a time (the Stage's case): AutoBuckets' padding efficiency and shapes per
block size, against planning the whole input once.

Ray runs in a network namespace with only loopback up (bench/loopback.py): run
as ``python bench/bench_ray.py``; it re-runs itself inside one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
import loopback  # noqa: E402

EXAMPLES, QUICK_EXAMPLES = 20_000, 1_500
BATCH = 64
BLOCK = 4096
WIDTH = 64
BLOCK_SIZES = (256, 1024, 4096, 16384)
# Ray's shared-memory object store: blocks and unit slices, not the data.
OBJECT_STORE_BYTES = 256 << 20
PARTS = 8
# Set in the run inside the namespace.
_REEXEC = "JAXBATCH_BENCH_RAY_INSIDE"


# --- the data and the function (the baseline's own, no jaxbatch) -------------


def make_tokens(n: int, seed: int = 0) -> list[np.ndarray]:
    """Ragged token ids: lengths 4 to 256, most short (a log-normal)."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(3.5, 0.7, n).astype(int), 4, 256)
    return [rng.integers(0, 1000, k).astype(np.int32) for k in lengths]


def write_input(tokens: list[np.ndarray], path: Path, parts: Path) -> None:
    """The corpus as one Parquet file (jaxbatch's input) and as PARTS files
    of consecutive rows in the folder `parts` (Ray Data's: it reads a file
    per task, so one file would feed one actor of the pool)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {"idx": np.arange(len(tokens)), "tokens": pa.array(tokens, pa.list_(pa.int32()))}
    )
    pq.write_table(table, path, row_group_size=4096)
    parts.mkdir()
    step = -(-len(tokens) // PARTS)
    for i in range(PARTS):
        pq.write_table(table.slice(i * step, step), parts / f"part-{i}.parquet")


def embed(tokens, mask):
    """One example's [L] tokens -> a [WIDTH] vector: a per-token MLP and a
    masked mean. Fixed pseudo-weights made from the ids keep it exact to
    recompute anywhere."""
    import jax.numpy as jnp

    x = (tokens[:, None] % 97).astype(jnp.float32) / 97.0 * jnp.arange(1, WIDTH + 1) / WIDTH
    for k in range(3):
        x = jnp.tanh(x @ (jnp.eye(WIDTH) * (0.9 + 0.05 * k)) + 0.01 * k)
    m = mask[:, None].astype(jnp.float32)
    return jnp.sum(x * m, axis=0) / jnp.maximum(jnp.sum(m), 1.0)


def jaxbatch_fun(example):
    return embed(example["tokens"], example["tokens_mask"])


class ExpertMapper:
    """The expert's Ray Data stage: 64 rows padded to their longest,
    jax.jit(jax.vmap(embed)) kept warm in the actor."""

    def __init__(self):
        import jax

        self.f = jax.jit(jax.vmap(embed))

    def __call__(self, batch):
        import os

        tokens = batch["tokens"]
        lengths = np.array([len(t) for t in tokens])
        longest = int(lengths.max())
        padded = np.zeros((len(tokens), longest), np.int32)
        mask = np.arange(longest)[None, :] < lengths[:, None]
        padded[mask] = np.concatenate(list(tokens))
        out = np.asarray(self.f(padded, mask))
        return {
            "idx": batch["idx"],
            "output": list(out),
            "padded": np.full(len(tokens), longest),
            "real": lengths,
            "pid": np.full(len(tokens), os.getpid()),
        }


# --- the contenders ------------------------------------------------------------


def run_jaxbatch(data: Path, out: Path, workers: int | None) -> dict:
    import jaxbatch as jb
    import jaxbatch.ray as jbr

    shutil.rmtree(out, ignore_errors=True)
    planner = jb.AutoBuckets(8, batch_size=BATCH)
    t0 = time.perf_counter()
    if workers is None:
        report = jb.run(jaxbatch_fun, data, out, column="tokens", planner=planner, progress=False)
    else:
        report = jbr.run(
            jaxbatch_fun,
            data,
            out,
            column="tokens",
            planner=planner,
            checkpoint_every=2048,
            workers=workers,
            progress=False,
        )
    seconds = time.perf_counter() - t0
    result = jb.read_output(out)
    return {
        "seconds": seconds,
        "outputs": np.asarray(result["output"]),
        "index": result["example_index"],
        "compilations": report.compilations,
        "padding": report.padding_efficiency,
    }


def run_ray_data(data: Path, stage: bool) -> dict:
    import pyarrow as pa
    import ray

    # Small blocks reach an actor pool bundled into one input (one actor
    # does all the work) unless repartitioned: measured, 20,000 rows in 8
    # files went to one of 2 actors, repartitioned to both.
    ds = ray.data.read_parquet(str(data)).repartition(PARTS)
    t0 = time.perf_counter()
    if stage:
        import jaxbatch as jb
        import jaxbatch.ray as jbr

        mapped = ds.map_batches(
            jbr.Stage,
            fn_constructor_kwargs={
                "fun": jaxbatch_fun,
                "planner": jb.AutoBuckets(8, batch_size=BATCH),
                "column": "tokens",
                "columns": ["tokens"],
            },
            batch_size=BLOCK,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=2),
        )
    else:
        mapped = ds.map_batches(
            ExpertMapper,
            batch_size=BATCH,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=2),
        )
    table = pa.concat_tables(ray.get(mapped.to_arrow_refs())).sort_by("idx")
    seconds = time.perf_counter() - t0
    outputs = np.stack([np.asarray(v, np.float32) for v in table.column("output").to_pylist()])
    if stage:
        return {"seconds": seconds, "outputs": outputs, "compilations": None, "padding": None}
    padded = table.column("padded").to_numpy()
    shapes = {(p, n) for p, n in zip(table.column("pid").to_numpy(), padded, strict=True)}
    real = table.column("real").to_numpy().sum()
    # Each batch's rows padded to its longest: the padded tokens are rows x longest.
    return {
        "seconds": seconds,
        "outputs": outputs,
        "compilations": len(shapes),
        "padding": float(real / padded.sum()),
    }


def commit_rate(data: Path, out: Path, n: int) -> dict:
    """Units a second when a unit is one batch (checkpoint_every=BATCH),
    two workers: the driver's dispatch-and-commit path, per unit, with the
    work per unit as small as it gets."""
    import jaxbatch as jb
    import jaxbatch.ray as jbr

    shutil.rmtree(out, ignore_errors=True)
    planner = jb.AutoBuckets(8, batch_size=BATCH)
    t0 = time.perf_counter()
    report = jbr.run(
        jaxbatch_fun, data, out, column="tokens", planner=planner, checkpoint_every=BATCH,
        workers=2, progress=False,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    # From the first unit's commit to the last's: the actors' start aside.
    times = sorted(r["committed"] for r in _unit_records(out))
    rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    return {"units": report.shards, "seconds": seconds, "units_per_second": rate}


def _unit_records(folder: Path) -> list[dict]:
    from jaxbatch._src.job.folder import JOURNAL_NAME, Journal

    with Journal(folder / JOURNAL_NAME, write=False) as journal:
        return [r for r in journal.records if r["kind"] == "shard"]


# --- block size and planning ---------------------------------------------------


def block_planning(tokens: list[np.ndarray], sizes) -> list[dict]:
    """AutoBuckets planned over each block alone, per block size, against
    the whole input planned once: padding efficiency and shapes."""
    import jaxbatch as jb

    lengths = np.array([len(t) for t in tokens])
    planner = jb.AutoBuckets(8, batch_size=BATCH)
    rows = []
    for size in (*sizes, len(lengths)):
        real = padded = 0
        shapes = set()
        for start in range(0, len(lengths), size):
            plan = jb.plan(lengths[start : start + size], planner)
            real += plan.stats.real_elements
            padded += plan.stats.padded_elements
            shapes |= {(s.rows, s.length) for s in plan.shapes}
        rows.append({"block": int(size), "efficiency": real / padded, "shapes": len(shapes)})
    return rows


# --- main ------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_arguments(parser)
    parser.add_argument("--results-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not loopback.inside():
        if os.environ.get(_REEXEC):  # Never re-run again: inside() said no twice.
            raise RuntimeError("bench_ray: re-run in a network namespace, but still not in one")
        reason = loopback.skip_reason()
        if reason is not None:
            print(f"bench_ray: {reason}; not run")
            return 1
        argv = list(sys.argv[1:] if argv is None else argv)
        if args.results_dir is None:
            argv += ["--results-dir", str(harness.RESULTS_DIR)]
        command = loopback.command([sys.executable, __file__, *argv])
        env = loopback.env(**{_REEXEC: "1"})
        return subprocess.run(command, env=env, timeout=3600).returncode
    env = harness.check_load(args.force)
    import ray

    n = QUICK_EXAMPLES if args.quick else EXAMPLES
    reps = harness.repetitions(args)
    tokens = make_tokens(n)
    work = Path(tempfile.mkdtemp(prefix="jbbench-"))
    ray_temp = tempfile.mkdtemp(prefix="jbrt-")
    try:
        data, parts = work / "input.parquet", work / "parts"
        write_input(tokens, data, parts)
        # Two CPUs for the two workers of every contender, one for Ray Data's
        # read tasks: with two, an actor pool of two holds both and the reads
        # behind it never run (the pipeline stalls).
        ray.init(
            num_cpus=3,
            include_dashboard=False,
            _temp_dir=ray_temp,
            log_to_driver=False,
            object_store_memory=OBJECT_STORE_BYTES,
        )
        contenders = {
            "jb.run": lambda: run_jaxbatch(data, work / "jb", None),
            "ray-1": lambda: run_jaxbatch(data, work / "r1", 1),
            "ray-2": lambda: run_jaxbatch(data, work / "r2", 2),
            "ray-data-expert": lambda: run_ray_data(parts, stage=False),
            "ray-data-stage": lambda: run_ray_data(parts, stage=True),
        }
        runs = harness.alternate(contenders, reps)
        reference = runs["jb.run"][0]
        np.testing.assert_array_equal(reference["index"], np.arange(n))
        for name, results in runs.items():
            for r in results:
                np.testing.assert_allclose(
                    r["outputs"], reference["outputs"], rtol=1e-5, atol=1e-6, err_msg=name
                )
        blocks = block_planning(tokens, BLOCK_SIZES)
        commits = commit_rate(data, work / "commits", n)
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(ray_temp, ignore_errors=True)
    rows = [["contender", "wall s", "examples/s", "compilations", "padding eff."]]
    summary = {}
    for name, results in runs.items():
        seconds = [r["seconds"] for r in results]
        last = results[-1]
        summary[name] = {
            "seconds": harness.summary(seconds),
            "examples_per_second": n / harness.summary(seconds)["median"],
            "compilations": last["compilations"],
            "padding_efficiency": last["padding"],
        }
        rows.append(
            [
                name,
                harness.spread(seconds),
                f"{n / summary[name]['seconds']['median']:.0f}",
                "-" if last["compilations"] is None else str(last["compilations"]),
                "-" if last["padding"] is None else f"{last['padding']:.1%}",
            ]
        )
    overhead = [
        b["seconds"] / a["seconds"] for a, b in zip(runs["jb.run"], runs["ray-1"], strict=True)
    ]
    print(f"bench_ray: {n} examples, {reps} repetitions; {harness.describe(env)}")
    print(harness.format_table(rows))
    print(f"ray-1 over jb.run (wall, per repetition): {harness.spread(overhead)}x")
    print(
        f"commit path: {commits['units']} units of one batch, 2 workers: "
        f"{commits['units_per_second']:.1f} units/s from the first commit to the last"
    )
    print("AutoBuckets(8, batch_size=64) planned one block at a time:")
    print(
        harness.format_table(
            [["block rows", "padding eff.", "shapes"]]
            + [
                [str(b["block"]) if i < len(blocks) - 1 else f"{n} (whole input)",
                 f"{b['efficiency']:.1%}", str(b["shapes"])]
                for i, b in enumerate(blocks)
            ]
        )
    )  # fmt: skip
    harness.write_json(
        "bench_ray",
        {
            "env": env,
            "examples": n,
            "reps": reps,
            "contenders": summary,
            "ray_1_over_jb_run": harness.summary(overhead),
            "block_planning": blocks,
            "commit_rate": commits,
        },
        None if args.results_dir is None else Path(args.results_dir),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

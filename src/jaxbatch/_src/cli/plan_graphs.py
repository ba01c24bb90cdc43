"""`jaxbatch plan GRAPHS.parquet [--graphs G] [--max-shapes K] [--multiple M]`:
the graph plan of a graph file (a Parquet/Arrow file with ``senders`` and
``receivers`` list columns, as the Loader reads graphs): the budget fitted
for G graph slots a batch (GraphBudget.fit, GraphBuckets.fit), and for each
planner the real nodes, edges and graphs, batches, shapes and planning time,
planned in a seeded shuffle as a shuffling Loader plans them."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.optional import require
from jaxbatch._src.base.words import counted
from jaxbatch._src.cli.common import aligned_table
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.data.graphs import RECEIVERS, SENDERS
from jaxbatch._src.data.opening import open_source
from jaxbatch._src.data.sources import reading
from jaxbatch._src.load.loader import LoaderOptions
from jaxbatch._src.plan.graph_fit import DEFAULT_MULTIPLE
from jaxbatch._src.plan.plan import BatchPlan, plan
from jaxbatch._src.plan.planners import GraphBuckets, GraphBudget

DEFAULT_GRAPHS = 32
DEFAULT_GRAPH_SHAPES = 4
ARROW_SUFFIXES = (".parquet", ".arrow", ".feather", ".ipc")
#: What messages about the data `jaxbatch plan` opens start with (see usage_error).
WHO = "jaxbatch plan"


def is_graph_file(path: str | None) -> bool:
    """Whether `path` is a Parquet/Arrow file with senders and receivers
    columns: graphs, as the Loader reads them."""
    if path is None or Path(path).suffix.lower() not in ARROW_SUFFIXES or not Path(path).is_file():
        return False
    return {SENDERS, RECEIVERS} <= set(file_schema(path).names)


def file_schema(path: str):
    """The Arrow schema of a Parquet/Arrow file (OSError naming a file that
    cannot be read)."""
    if Path(path).suffix.lower() == ".parquet":
        pq = require("pyarrow.parquet", f"jaxbatch plan reading {path}")
        with reading(path, "Parquet", WHO):
            return pq.read_schema(path)
    return _table(path).schema


def _table(path: str):
    if Path(path).suffix.lower() == ".parquet":
        pq = require("pyarrow.parquet", f"jaxbatch plan reading {path}")
        with reading(path, "Parquet", WHO):
            return pq.read_table(path)
    feather = require("pyarrow.feather", f"jaxbatch plan reading {path}")
    with reading(path, "Arrow IPC", WHO):
        return feather.read_table(path)


def load_graphs(path: str) -> Dataset:
    """The graph Dataset of a graph file, opened as a Loader opens it;
    ValueError naming the file for graphs the engine refuses."""
    return open_source(path, LoaderOptions(), graphs=True, who=WHO).dataset


def plan_graphs(
    ds: Dataset, graphs: int, max_shapes: int, multiple: int, seed: int = 0
) -> list[tuple[str, BatchPlan, float]]:
    """GraphBudget and GraphBuckets fitted for `graphs` graph slots, each
    with its plan in one seeded shuffle and the seconds fitting and planning
    took."""
    order = np.random.default_rng(seed).permutation(len(ds))
    results = []
    for fit in (
        lambda: GraphBudget.fit(ds, graphs, multiple=multiple),
        lambda: GraphBuckets.fit(ds, graphs, max_shapes=max_shapes, multiple=multiple),
    ):
        start = time.perf_counter()
        planner = fit()
        p = plan(ds, planner, order=order)
        results.append((_name(planner), p, time.perf_counter() - start))
    return results


def _name(planner: GraphBudget | GraphBuckets) -> str:
    budget = f"nodes={planner.nodes}, edges={planner.edges}, graphs={planner.graphs}"
    if isinstance(planner, GraphBuckets):
        return f"GraphBuckets(max_shapes={planner.max_shapes}, {budget})"
    return f"GraphBudget({budget})"


def format_graph_table(results: list[tuple[str, BatchPlan, float]]) -> str:
    header = (
        "planner",
        "real nodes",
        "real edges",
        "real graphs",
        "shapes",
        "batches",
        "fit+plan s",
    )
    rows = [
        (
            name,
            f"{p.stats.node_efficiency:.1%}",
            f"{p.stats.edge_efficiency:.1%}",
            f"{p.stats.graph_efficiency:.1%}",
            str(p.stats.shapes),
            str(p.stats.batches),
            f"{seconds:.2f}",
        )
        for name, p, seconds in results
    ]
    return aligned_table(header, rows)


def graph_plan_command(args: argparse.Namespace) -> int:
    for flag, value in (("--pack", args.pack), ("--plot", args.plot), ("--column", args.column)):
        if value:
            raise ValueError(
                f"{flag} does not apply to graph data ({args.file} has {SENDERS} and {RECEIVERS} "
                f"columns); graphs are planned by node and edge counts"
            )
    if args.token_budget is not None:
        raise ValueError(
            f"--token-budget does not apply to graph data ({args.file}); give --graphs G, the "
            "graph slots a batch, and the node and edge budget is fitted"
        )
    graphs = DEFAULT_GRAPHS if args.graphs is None else args.graphs
    shapes = DEFAULT_GRAPH_SHAPES if args.max_shapes is None else args.max_shapes
    multiple = DEFAULT_MULTIPLE if args.multiple is None else args.multiple
    ds = load_graphs(args.file)
    results = plan_graphs(ds, graphs, shapes, multiple)  # Refused before any output.
    print(f"data: {args.file}, {counted(len(ds), 'graph')} ({SENDERS}/{RECEIVERS} columns)")
    print(_sizes(ds))
    print(
        f"budget fitted for {graphs} graph slots a batch (one is the padding graph), "
        f"nodes and edges rounded up to a multiple of {multiple}; planned in a seeded shuffle\n"
    )
    print(format_graph_table(results))
    buckets = results[1][1]
    print(f"\nGraphBuckets shapes (graph slots, node slots, edge slots): {_shapes(buckets)}")
    print(
        "\nreal nodes / edges / graphs: real over slots, the padding graph's slot included;"
        "\nshapes: distinct batch shapes = compilations under jax.jit."
    )
    return 0


def _sizes(ds: Dataset) -> str:
    nodes, edges = _core.graph_counts(ds._core, "jaxbatch plan")
    return (
        f"{counted(int(nodes.sum()), 'node')}, {counted(int(edges.sum()), 'edge')}; a graph's "
        f"nodes: mean {nodes.mean():.1f}, max {nodes.max()}; edges: mean {edges.mean():.1f}, "
        f"max {edges.max()}"
    )


def _shapes(p: BatchPlan) -> str:
    return ", ".join(f"({s.rows}, {s.length}, {s.edges})" for s in p.shapes)

"""bench_graphs' planning-bound row: how close jb.GraphBudget's planners
come to the fewest batches any plan can have, max(sum nodes / (nodes - 1),
sum edges / edges, count / (graphs - 1)), on molecule sizes at Flax's ogbg
budget (577 node slots, 1,088 edge slots, 33 graph slots: batch 32 plus
jraph's padding node and graph), what that costs in planning time, and how
random the batches stay. Every plan is of a seeded shuffle (SHUFFLES of
them), as a shuffling Loader plans an epoch.

Randomness, over the graphs' node counts:
- correlation: of the sizes of two graphs in one batch. 0 for random
  batches, positive when like goes with like (batches sorted by size),
  slightly negative when batches are evened out.
- stray: how far a batch's mean size strays from the data's mean (standard
  deviation), over what a random batch of as many graphs strays: 1 for
  random batches, above 1 for batches of like sizes, below 1 for batches
  evened out.

Before: best fit as committed before issue 28 (eba4b01: each graph, in
order, into the fullest of 8 open batches that holds it). Its batches come
from old_best_fit, a copy of it in Python (the same batch counts as the
C++ at eba4b01 on the data sets checked); its planning time was measured
once on the C++ at eba4b01 (BEFORE), not here."""

from __future__ import annotations

import time
from typing import Any

import harness
import numpy as np

FLAX_OGBG = (577, 1088, 33)  # node, edge, graph slots
SHUFFLES = 10
SEED = 28
# PlanGraphBudget over 5,000 molecule-like sizes at FLAX_OGBG, fastest of 31
# shuffles, C++ -O3, on an AMD EPYC (2 cores): best fit at eba4b01 and after.
BEFORE = {"commit": "eba4b01", "best_fit_ms": 0.36, "after_ms": 0.56, "cpu": "AMD EPYC"}


def lower_bound(nodes: np.ndarray, edges: np.ndarray, budget: tuple[int, int, int]) -> float:
    n, e, g = budget
    return max(nodes.sum() / (n - 1), edges.sum() / e, len(nodes) / (g - 1))


def old_best_fit(nodes, edges, order, budget, window: int = 8) -> list[list[int]]:
    """Best fit at eba4b01: each graph into the open batch with the least
    room left after it (room as a fraction of the node and edge budgets);
    when none holds it a new one opens, and with `window` open the fullest
    closes first; a batch of graphs - 1 graphs closes."""
    cap_n, cap_e, cap_g = budget[0] - 1, budget[1], budget[2] - 1

    def slack(n, e):
        return (cap_n - n) / cap_n + (cap_e - e) / cap_e

    open_, out = [], []
    for i in order:
        n, e = int(nodes[i]), int(edges[i])
        fits = [k for k, b in enumerate(open_) if b[0] + n <= cap_n and b[1] + e <= cap_e]
        if fits:
            k = min(fits, key=lambda k: slack(open_[k][0] + n, open_[k][1] + e))
        else:
            if len(open_) == window:
                out.append(open_.pop(min(range(window), key=lambda k: slack(*open_[k][:2])))[2])
            open_.append([0, 0, []])
            k = len(open_) - 1
        b = open_[k]
        b[0], b[1] = b[0] + n, b[1] + e
        b[2].append(int(i))
        if len(b[2]) == cap_g:
            out.append(open_.pop(k)[2])
    return out + [b[2] for b in open_]


def randomness(batches: list[list[int]], sizes: np.ndarray) -> tuple[float, float]:
    """(correlation, stray) of the sizes in `batches` (see the module)."""
    x = sizes.astype(float) - sizes.mean()
    pairs = sum(len(b) * (len(b) - 1) / 2 for b in batches)
    pair_sum = sum(x[b].sum() ** 2 - (x[b] ** 2).sum() for b in batches) / 2
    strays = [x[b].mean() / np.sqrt(x.var() / len(b)) for b in batches]
    return float(pair_sum / pairs / x.var()), float(np.sqrt(np.mean(np.square(strays))))


def library_sizes(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic library of fragments and drug-sized molecules: heavy
    atoms right-skewed (gamma, shape 6) about 10 for 70% of them and 33 for
    the rest, bonds = atoms - 1 + rings, an edge per bond each way. At
    FLAX_OGBG all three budgets nearly bind."""
    rng = np.random.default_rng(seed)
    mean = np.where(rng.random(count) < 0.3, 33.0, 10.0)
    nodes = np.maximum(1, np.round(rng.gamma(6.0, mean / 6.0))).astype(np.int64)
    rings = np.where(nodes > 2, rng.binomial(nodes, 0.08), 0)
    return nodes, 2 * (nodes - 1 + rings)


def size_dataset(nodes, edges):
    """A graph dataset of these node and edge counts (features all ones)."""
    import jaxbatch as jb

    return jb.Dataset.from_graphs(
        [
            {"nodes": np.ones((int(n), 1), np.float32), "senders": np.zeros(int(e), np.int32),
             "receivers": np.zeros(int(e), np.int32), "n_node": np.array([n]),
             "n_edge": np.array([e])}
            for n, e in zip(nodes, edges, strict=True)
        ]
    )  # fmt: skip


def graph_batches(plan) -> list[list[int]]:
    """Each batch's graph ids, slot by slot (the padding slots hold none)."""
    return [[int(i) for row in spec.rows for i in row] for spec in plan]


def measure(nodes, edges, budget: tuple[int, int, int]) -> dict[str, Any]:
    """Each planner's mean batches, their excess over the bound, randomness
    and median planning time (jb.plan, seconds) over SHUFFLES shuffles."""
    import jaxbatch as jb

    nodes, edges = np.asarray(nodes, np.int64), np.asarray(edges, np.int64)
    dataset = size_dataset(nodes, edges)

    sizes = dict(zip(("nodes", "edges", "graphs"), budget, strict=True))
    planners = {
        "next_fit": jb.GraphBudget(**sizes, algorithm="next_fit"),
        "first_fit": jb.GraphBudget(**sizes, algorithm="first_fit"),
        "best_fit": jb.GraphBudget(**sizes),
    }
    orders = [np.random.default_rng([SEED, k]).permutation(len(nodes)) for k in range(SHUFFLES)]
    bound = lower_bound(nodes, edges, budget)
    rows = {}
    for name in [*planners, "best_fit_before"]:
        counts, correlations, strays, seconds = [], [], [], []
        for order in orders:
            t0 = time.perf_counter()
            if name == "best_fit_before":
                batches = old_best_fit(nodes, edges, order, budget)
                seconds.append(time.perf_counter() - t0)
            else:
                plan = jb.plan(dataset, planners[name], order=order)
                seconds.append(time.perf_counter() - t0)
                batches = graph_batches(plan)
            counts.append(len(batches))
            c, s = randomness(batches, nodes)
            correlations.append(c)
            strays.append(s)
        rows[name] = {
            "batches": float(np.mean(counts)),
            "over_bound": float(np.mean(counts)) / bound - 1,
            "correlation": float(np.mean(correlations)),
            "stray": float(np.mean(strays)),
            "plan_seconds": None if name == "best_fit_before" else float(np.median(seconds)),
        }
    return {"budget": list(budget), "graphs": len(nodes), "bound": bound, "planners": rows}


def rows(graphs: list, library: int = 5000) -> dict[str, dict[str, Any]]:
    """The row's data sets: the molecules `graphs` (single jraph graphs) at
    FLAX_OGBG and at Flax's own estimate for them (every graph's mean size
    times 32 to the next multiple of 64, plus the padding node; 33 graph
    slots), and a synthetic library of `library` at FLAX_OGBG."""
    nodes = np.array([int(g.n_node[0]) for g in graphs])
    edges = np.array([int(g.n_edge[0]) for g in graphs])
    own = (64 * (1 + int(nodes.mean() * 32 // 64)) + 1, 64 * (1 + int(edges.mean() * 32 // 64)), 33)
    lib_nodes, lib_edges = library_sizes(library, SEED)
    return {
        "molecules": measure(nodes, edges, FLAX_OGBG),
        "molecules, own budget": measure(nodes, edges, own),
        f"library of {library}": measure(lib_nodes, lib_edges, FLAX_OGBG),
    }


def report(results: dict[str, dict[str, Any]], cpu: str) -> str:
    """The rows, one per data set and planner, and the CPU they ran on."""
    table = [("data", "budget", "planner", "batches", "bound", "over bound", "correlation",
              "stray", "plan ms")]  # fmt: skip
    for data, r in results.items():
        for name, p in r["planners"].items():
            ms = (
                f"{1e3 * p['plan_seconds']:.2f}"
                if p["plan_seconds"] is not None
                else f"C++ {BEFORE['best_fit_ms']} (vs {BEFORE['after_ms']}) at {BEFORE['commit']}"
            )
            table.append((data, "/".join(map(str, r["budget"])), name, f"{p['batches']:.1f}",
                          f"{r['bound']:.1f}", f"{p['over_bound']:+.1%}",
                          f"{p['correlation']:+.3f}", f"{p['stray']:.2f}", ms))  # fmt: skip
    return (
        f"planning bound ({SHUFFLES} shuffles; jb.plan times; C++ before/after times on "
        f"{BEFORE['cpu']}):\n{harness.format_table(table)}\non {cpu}"
    )

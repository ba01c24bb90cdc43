"""Packing anchors for bench_loader.py: compiled first-fit and best-fit
packers (numba) that produce jaxbatch's rows exactly, and Grain's packers.

``first_fit`` and ``best_fit`` follow jaxbatch's packer (cc/jaxbatch/plan/
packer.h) step for step, so their rows are checked equal to ``jb.plan``'s:
  first fit  each example, in order, goes to the leftmost open row with room
             (a max segment tree over row rooms, O(n log n));
  best fit   best-fit decreasing: longest first (stable), each example goes
             to the open row with the least room that still fits it, the
             lowest row among equals (a count tree over room values finds the
             room, a min-heap per room value the row);
  rows stay open for a window of ``lookahead`` examples (0 = all), then
  close; a row holding ``max_segments`` examples closes too.
Without numba (the test environment) the same functions run as plain Python,
on small inputs.

Grain's FirstFitPackIterDataset / BestFitPackIterDataset stream with
``num_packing_bins`` open rows and emit their own rows (not jaxbatch's), so
they are compared with jaxbatch's streaming loader on examples/s and padding,
and checked to hold every example's tokens once.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import logging
import time
from collections.abc import Callable
from typing import Any

import harness
import numpy as np

import jaxbatch as jb

try:
    import numba

    jit = numba.njit(cache=False)
    COMPILED = True
except ImportError:  # the test environment: plain Python, small inputs

    def jit(fn):
        return fn

    COMPILED = False

ROW_LENGTH = 4096
MAX_SEGMENTS = 64
ROWS_PER_BATCH = 8  # Grain's num_packing_bins
GRAIN_EXAMPLES = 100_000
# --quick checks that the packers run and agree, not their rates: 1,500
# examples (mean length 100) fill about 36 rows of 4,096, several windows'
# worth, and 1,000 about 24 rows against Grain's 8 bins.
QUICK_GRAIN_EXAMPLES = 1_000
QUICK_PACK_EXAMPLES = 1_500


@jit
def _emit_rows(members, row_of, count, rows, written, rows_total, out_ids, row_begin, fill):
    """Writes one window's rows in the order they opened, each row's examples
    in the order they arrived: members[k] went to row row_of[k]."""
    fill[0] = written
    for r in range(rows):
        fill[r + 1] = fill[r] + count[r]
        row_begin[rows_total + r + 1] = fill[r + 1]
    for k in range(len(members)):
        r = row_of[k]
        out_ids[fill[r]] = members[k]
        fill[r] += 1


@jit
def _first_fit(lengths, ids, row_length, max_segments, lookahead, out_ids, row_begin):
    n = len(ids)
    window = lookahead if lookahead > 0 else n
    size = 1
    while size < min(window, n):
        size *= 2
    tree = np.empty(2 * size, np.int64)
    room = np.empty(size, np.int64)
    count = np.empty(size, np.int64)
    row_of = np.empty(size, np.int64)
    fill = np.empty(size + 1, np.int64)
    written = 0
    rows_total = 0
    for start in range(0, n, window):
        m = min(window, n - start)
        tree[:] = -1
        rows = 0
        for k in range(m):
            need = min(lengths[ids[start + k]], row_length)
            if tree[1] >= need:
                node = 1
                while node < size:
                    node = 2 * node if tree[2 * node] >= need else 2 * node + 1
                row = node - size
            else:
                row = rows
                rows += 1
                room[row] = row_length
                count[row] = 0
            row_of[k] = row
            room[row] -= need
            count[row] += 1
            node = row + size
            tree[node] = -1 if count[row] >= max_segments else room[row]
            node //= 2
            while node >= 1:
                tree[node] = max(tree[2 * node], tree[2 * node + 1])
                node //= 2
        _emit_rows(ids[start : start + m], row_of, count, rows, written, rows_total, out_ids,
                   row_begin, fill)  # fmt: skip
        written += m
        rows_total += rows
    return rows_total


@jit
def _best_fit(lengths, ids, row_length, max_segments, lookahead, out_ids, row_begin):
    n = len(ids)
    window = lookahead if lookahead > 0 else n
    size = 1
    while size < row_length + 1:
        size *= 2
    counts = np.zeros(2 * size, np.int64)  # open rows per room value, summed up the tree
    sentinel = np.iinfo(np.int64).max
    heaps = [[sentinel] for _ in range(row_length + 1)]  # open rows per room, lowest first
    cap = min(window, n)
    room = np.empty(cap, np.int64)
    count = np.empty(cap, np.int64)
    row_of = np.empty(cap, np.int64)
    fill = np.empty(cap + 1, np.int64)
    written = 0
    rows_total = 0
    for start in range(0, n, window):
        m = min(window, n - start)
        chunk = ids[start : start + m]
        # Stable, longest first (std::stable_sort with >).
        order = chunk[np.argsort(-lengths[chunk], kind="mergesort")]
        rows = 0
        for k in range(m):
            need = min(lengths[order[k]], row_length)
            # The smallest room value >= need with an open row: from leaf
            # `need`, the first subtree to its right with a count, then down.
            found = -1
            node = need + size
            if counts[node] == 0:
                while True:
                    while node & 1:  # a right child (the root is 1): go up
                        node >>= 1
                    if node == 0:
                        break
                    node += 1
                    if counts[node] > 0:
                        break
            if node > 0:
                while node < size:
                    node = 2 * node if counts[2 * node] > 0 else 2 * node + 1
                found = node - size
            if found < 0:
                row = rows
                rows += 1
                room[row] = row_length
                count[row] = 0
            else:
                row = heapq.heappop(heaps[found])
                node = found + size
                while node >= 1:
                    counts[node] -= 1
                    node //= 2
            row_of[k] = row
            room[row] -= need
            count[row] += 1
            if count[row] < max_segments:
                heapq.heappush(heaps[room[row]], row)
                node = room[row] + size
                while node >= 1:
                    counts[node] += 1
                    node //= 2
        # Close the window's rows: empty every heap they are in.
        for r in range(rows):
            if count[r] < max_segments:
                heapq.heappop(heaps[room[r]])
                node = room[r] + size
                while node >= 1:
                    counts[node] -= 1
                    node //= 2
        _emit_rows(order, row_of, count, rows, written, rows_total, out_ids, row_begin, fill)
        written += m
        rows_total += rows
    return rows_total


def pack_rows(
    algorithm: str, lengths: np.ndarray, row_length: int, max_segments: int, lookahead: int
) -> tuple[np.ndarray, np.ndarray]:
    """jaxbatch's rows for examples 0..n-1 in order: (row_begin, example_ids),
    row r holding example_ids[row_begin[r]:row_begin[r + 1]]."""
    fn = {"first_fit": _first_fit, "best_fit": _best_fit}[algorithm]
    lengths = np.ascontiguousarray(lengths, np.int64)
    ids = np.arange(len(lengths), dtype=np.int64)
    out = np.empty(len(ids), np.int64)
    row_begin = np.zeros(len(ids) + 1, np.int64)
    rows = fn(lengths, ids, row_length, max_segments, lookahead, out, row_begin)
    return row_begin[: rows + 1], out


def jaxbatch_rows(plan: jb.BatchPlan) -> tuple[np.ndarray, np.ndarray]:
    """A packed plan's rows as (row_begin, example_ids), padding rows left out."""
    rows = [r for spec in plan for r in spec.rows if len(r)]
    row_begin = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=row_begin[1:])
    return row_begin, np.concatenate(rows) if rows else np.zeros(0, np.int64)


def pack_planner(algorithm: str, lookahead: int, open_rows: int | None = None) -> jb.Pack:
    return jb.Pack(
        ROW_LENGTH,
        ROWS_PER_BATCH,
        max_segments_per_row=MAX_SEGMENTS,
        algorithm=algorithm,
        lookahead=lookahead or None,
        remainder="keep",
        open_rows=open_rows,
    )


# --------------------------------------------------------------------------- Grain


def grain_pack(items: list[dict], algorithm: str) -> tuple[int, int, int]:
    """Packs `items` with Grain's streaming packer, reading in the caller's
    thread (Grain's advice for in-memory data); every row consumed. Returns
    (rows, real tokens, sum of tokens) for the checks."""
    import grain
    import grain.experimental

    cls = {
        "first_fit": grain.experimental.FirstFitPackIterDataset,
        "best_fit": grain.experimental.BestFitPackIterDataset,
    }[algorithm]
    source = grain.MapDataset.source(items).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    )
    ds = cls(
        source,
        length_struct={"tokens": ROW_LENGTH},
        num_packing_bins=ROWS_PER_BATCH,
        shuffle_bins=False,
    )
    rows = real = total = 0
    for row in ds:
        rows += 1
        real += int(np.count_nonzero(row["tokens_segment_ids"]))
        total += int(row["tokens"].sum(dtype=np.int64))
    return rows, real, total


def jaxbatch_stream(values: np.ndarray, offsets: np.ndarray, planner: jb.Pack) -> tuple:
    """jb.Loader over the examples in order with one thread (as Grain's
    packer runs in one): (rows, real tokens, sum of tokens)."""
    ds = jb.Dataset.from_arrays({"tokens": (values, offsets)})
    rows = real = total = 0
    with jb.Loader(ds, planner, shuffle=False, num_threads=1) as loader:
        for batch in loader:
            rows += batch["tokens"].shape[0]
            real += int(np.count_nonzero(batch["tokens_segment_ids"]))
            total += int(batch["tokens"].sum(dtype=np.int64))
    return rows, real, total


# --------------------------------------------------------------------------- section


def timed(fn: Callable[[], Any]) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        gc.collect()
        start = time.perf_counter()
        out = fn()
        return {"seconds": time.perf_counter() - start, "out": out}

    return run


def bench_packing(lengths: np.ndarray, args: argparse.Namespace, reps: int) -> dict[str, Any]:
    """Rows only (lengths in, rows out): jb.plan against the numba packers,
    same rows, whole data set and a bounded window; then Grain's streaming
    packers against jaxbatch's streaming loader, arrays out."""
    n = len(lengths)
    window = max(1, int(ROWS_PER_BATCH * ROW_LENGTH / lengths.mean()))
    out: dict[str, Any] = {
        "compiled": COMPILED,
        "row_length": ROW_LENGTH,
        "max_segments": MAX_SEGMENTS,
        "window": window,
        "examples": n,
        "rows": {},
    }
    table = [
        [
            "packing (rows only)",
            "algorithm",
            "jaxbatch ex/s",
            "numba ex/s",
            "jaxbatch / numba",
            "padded/token",
        ]
    ]
    sub = lengths if COMPILED else lengths[: min(n, 5_000)]
    if args.quick:
        sub = sub[:QUICK_PACK_EXAMPLES]
    for scope, lookahead in (("whole data set", 0), (f"window {window}", window)):
        for algorithm in ("first_fit", "best_fit"):
            planner = pack_planner(algorithm, lookahead)
            if COMPILED:  # compile outside timing
                pack_rows(algorithm, sub[:100], ROW_LENGTH, MAX_SEGMENTS, lookahead)
            plan = jb.plan(sub, planner)
            want = jaxbatch_rows(plan)
            got = pack_rows(algorithm, sub, ROW_LENGTH, MAX_SEGMENTS, lookahead)
            for name, a, b in zip(("row_begin", "example_ids"), want, got, strict=True):
                if not np.array_equal(a, b):
                    raise AssertionError(f"packing {scope} {algorithm}: numba {name} differ")
            runs = harness.alternate(
                {
                    "jaxbatch": timed(lambda p=planner: jb.plan(sub, p)),
                    "numba": timed(
                        lambda a=algorithm, la=lookahead: pack_rows(
                            a, sub, ROW_LENGTH, MAX_SEGMENTS, la
                        )
                    ),
                },
                reps,
            )
            rates = {k: [len(sub) / r["seconds"] for r in rs] for k, rs in runs.items()}
            ratio = [a / b for a, b in zip(rates["jaxbatch"], rates["numba"], strict=True)]
            padded = (len(want[0]) - 1) * ROW_LENGTH / int(sub.sum())
            out["rows"][f"{scope} {algorithm}"] = {
                "examples": len(sub),
                "rows": len(want[0]) - 1,
                "padded_per_token": padded,
                "jaxbatch_examples_per_s": harness.summary(rates["jaxbatch"]),
                "numba_examples_per_s": harness.summary(rates["numba"]),
                "ratio": harness.summary(ratio),
            }
            table.append(
                [
                    scope,
                    algorithm,
                    harness.spread(rates["jaxbatch"], ",.0f"),
                    harness.spread(rates["numba"], ",.0f"),
                    harness.spread(ratio),
                    f"{padded:.3f}",
                ]
            )
    print(
        f"\n== packing: rows of {ROW_LENGTH}, at most {MAX_SEGMENTS} segments "
        f"({'numba' if COMPILED else 'plain Python, numba not installed'}; same rows checked)"
    )
    print(harness.format_table(table))
    try:
        import grain  # noqa: F401
    except ImportError:
        return out
    logging.getLogger("absl").setLevel(logging.ERROR)
    out["grain"] = bench_grain(lengths, args, reps, window)
    return out


def bench_grain(lengths: np.ndarray, args: argparse.Namespace, reps: int, window: int) -> dict:
    """Grain's streaming packers (ROWS_PER_BATCH bins) against
    jb.Loader(Pack(open_rows=ROWS_PER_BATCH)), the same number of open rows,
    one thread each, arrays out, on the first examples. Grain emits every bin
    when an example fits none; jaxbatch closes only the fullest row."""
    n = min(len(lengths), QUICK_GRAIN_EXAMPLES if args.quick else GRAIN_EXAMPLES)
    sub = lengths[:n]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sub, out=offsets[1:])
    rng = np.random.default_rng(0)
    values = rng.integers(1, 32_000, int(offsets[-1]), dtype=np.int32)
    items = [{"tokens": values[offsets[i] : offsets[i + 1]]} for i in range(n)]
    want_real, want_total = int(offsets[-1]), int(values.sum(dtype=np.int64))
    out: dict[str, Any] = {"examples": n, "num_packing_bins": ROWS_PER_BATCH, "window": window}
    table = [
        ["streaming packer (arrays out, 1 thread)", "examples/s", "padded/token", "jaxbatch / it"]
    ]
    for algorithm in ("first_fit", "best_fit"):
        planner = pack_planner(algorithm, 0, open_rows=ROWS_PER_BATCH)
        runs = harness.alternate(
            {
                "jaxbatch": timed(lambda p=planner: jaxbatch_stream(values, offsets, p)),
                "grain": timed(lambda a=algorithm: grain_pack(items, a)),
            },
            reps,
        )
        for name, rs in runs.items():
            for r in rs:
                _, real, total = r["out"]
                if (real, total) != (want_real, want_total):
                    raise AssertionError(f"{name} {algorithm}: lost or repeated tokens")
        rates = {k: [n / r["seconds"] for r in rs] for k, rs in runs.items()}
        ratio = [a / b for a, b in zip(rates["jaxbatch"], rates["grain"], strict=True)]
        padded = {k: rs[0]["out"][0] * ROW_LENGTH / want_real for k, rs in runs.items()}
        out[algorithm] = {
            "jaxbatch": {
                "describe": repr(planner),
                "padded_per_token": padded["jaxbatch"],
                "examples_per_s": harness.summary(rates["jaxbatch"]),
            },
            "grain": {
                "padded_per_token": padded["grain"],
                "examples_per_s": harness.summary(rates["grain"]),
            },
            "ratio": harness.summary(ratio),
        }
        table.append(
            [
                f"jaxbatch {algorithm}, {ROWS_PER_BATCH} open rows",
                harness.spread(rates["jaxbatch"], ",.0f"),
                f"{padded['jaxbatch']:.3f}",
                "",
            ]
        )
        table.append(
            [
                f"Grain {algorithm}, {ROWS_PER_BATCH} bins",
                harness.spread(rates["grain"], ",.0f"),
                f"{padded['grain']:.3f}",
                harness.spread(ratio),
            ]
        )
    print(
        f"\n== streaming packing vs Grain on the first {n:,} examples (own rows each; every "
        "token once checked)"
    )
    print(harness.format_table(table))
    return out

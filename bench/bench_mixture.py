"""A mixture of K sources packed together: shares, padding, throughput, memory.

Data: K sources whose lengths are the embedded pydoc paragraphs' (CPython's
bundled help text, the benchmarks' real text: src/jaxbatch/_src/data/
default_data.py), drawn per source and scaled by 1, 2, 4 or 8 by source, so
the sources' length distributions differ eightfold (token ids random, as in
bench_loader). Planner: Pack into rows of ROW_LENGTH, ROWS_PER_BATCH rows a
batch (first fit, as bench_loader's packed plan).

Sections (each printed as a table, all in the JSON):

- shares: K=3 sources weighted 0.5 / 0.3 / 0.2. For every window of WINDOW
  consecutive batches, each source's share of the window's real tokens
  against its weight; the worst deviation (percentage points) over all
  windows and sources, for unit="tokens", for unit="examples" (the anchors'
  semantics: the same weights on examples), and for Grain's ``mix`` of the
  same sources followed by its FirstFitPackIterDataset, with the weights on
  examples and with them divided by each source's mean length (what a user
  does by hand for token weights); Grain over GRAIN_SHARE_BATCHES batches.
- padding: the mixture's real / padded tokens against packing each source
  alone (a Loader per source, its share of the tokens weighing its figure).
- throughput: real tokens/s of the mixture's Loader, of the single-source
  Loader over the same examples laid end to end (jb.Dataset.concat), and of
  Grain's ``MapDataset.mix`` + ``to_iter_dataset(ReadOptions(num_threads=
  THREADS))`` + ``FirstFitPackIterDataset``, THREADS threads each (and
  Grain reading in the caller's thread, its advice for in-memory data), in
  alternating repetitions (bench/harness.py), median (min-max).
- scale: for K = 1, 10, 100 sources of the same total examples, each in a
  fresh process: threads alive and the peak RSS growth while the mixture's
  Loader yields SCALE_BATCHES (over the process after it built the data),
  and the state's JSON bytes; Grain's mix pipeline beside it.

Outputs are checked, not assumed: every jaxbatch segment is checked against
its source's example (source_index, example_index); Grain's rows hold real
tokens of its sources only (token ids are tagged by source). The schedules
differ by design (blocks of draws against per-position choice), so batches
are not compared one to one.

    python bench/bench_mixture.py [--quick] [--force] [--reps N]
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

import jaxbatch as jb  # noqa: E402
from jaxbatch._src.data.default_data import pydoc_lengths  # noqa: E402

SEED = 0
ROW_LENGTH = 2048
ROWS_PER_BATCH = 8
THREADS = 2
WINDOW = 100  # batches
WEIGHTS = (0.5, 0.3, 0.2)
SCALES = (1, 2, 4, 8)
EXAMPLES = 60_000  # per source, shares and throughput sections
QUICK_EXAMPLES = 3_000
SHARE_BATCHES = 3_000
QUICK_SHARE_BATCHES = 240
TIMED_BATCHES = 1_500
# Grain packs in Python (~0.1-0.2 M tokens/s here): fewer of its batches.
GRAIN_SHARE_BATCHES = 600
GRAIN_TIMED_BATCHES = 100
QUICK_GRAIN_BATCHES = 12
QUICK_TIMED_BATCHES = 40
SCALE_EXAMPLES = 400_000  # in all, over K sources
QUICK_SCALE_EXAMPLES = 20_000
SCALE_BATCHES = 400
QUICK_SCALE_BATCHES = 20
SCALE_KS = (1, 10, 100)
TAG = 1 << 24  # token id = source * TAG + random id: a token says its source


# --------------------------------------------------------------------------- data


def source_arrays(k: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Source k's tokens as (values, offsets): pydoc lengths x SCALES[k % 4]."""
    rng = np.random.default_rng(SEED + k)
    base = pydoc_lengths()
    lengths = np.minimum(base[rng.integers(0, len(base), count)] * SCALES[k % len(SCALES)],
                         ROW_LENGTH)  # fmt: skip
    lengths = np.maximum(lengths, 1)
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = (rng.integers(1, 32_000, int(offsets[-1])) + k * TAG).astype(np.int32)
    return values, offsets


def sources(k: int, count: int) -> dict[str, jb.Dataset]:
    return {f"s{i}": jb.Dataset.from_arrays({"tokens": source_arrays(i, count)}) for i in range(k)}


def planner() -> jb.Pack:
    return jb.Pack(ROW_LENGTH, ROWS_PER_BATCH, algorithm="first_fit")


# --------------------------------------------------------------------------- jaxbatch


def tokens_by_source(batch: Any, k: int) -> np.ndarray:
    s = batch["source_index"]
    out = np.zeros(k, np.int64)
    np.add.at(out, s[s >= 0], batch["tokens_lengths"][s >= 0])
    return out


def check_segments(batch: Any, data: dict[str, jb.Dataset]) -> None:
    """Every segment's tokens are its source's example's (source_index and
    example_index name it): raises otherwise."""
    names = list(data)
    seg, pos = batch["tokens_segment_ids"], batch["tokens_positions"]
    for r, k in zip(*np.nonzero(batch["source_index"] >= 0), strict=True):
        s, e = batch["source_index"][r, k], batch["example_index"][r, k]
        cells = seg[r] == k + 1
        want = data[names[s]][int(e)]["tokens"][pos[r][cells]]
        if not np.array_equal(batch["tokens"][r][cells], want):
            raise AssertionError(f"segment ({r}, {k}) is not example {e} of source {names[s]}")


def mixture_shares(data: dict[str, jb.Dataset], unit: str, batches: int) -> np.ndarray:
    """Real tokens per source in each of `batches` batches of the mixture."""
    mix = jb.Dataset.mix(data, dict(zip(data, WEIGHTS, strict=True)), unit=unit)
    loader = jb.Loader(mix, planner(), seed=SEED, epochs=None, num_threads=THREADS)
    out = []
    for i in range(batches):
        batch = next(loader)
        if i < 3:
            check_segments(batch, data)
        out.append(tokens_by_source(batch, len(data)))
    loader.close()
    return np.array(out)


def worst_window(per_batch: np.ndarray, window: int) -> float:
    """The largest |share - weight| of any source over any window of
    `window` consecutive batches, in percentage points."""
    w = np.array(WEIGHTS[: per_batch.shape[1]])
    w = w / w.sum()
    sums = np.cumsum(np.vstack([np.zeros(per_batch.shape[1]), per_batch]), axis=0)
    windows = sums[window:] - sums[:-window]
    shares = windows / windows.sum(1, keepdims=True)
    return float(np.abs(shares - w).max() * 100)


def loader_rate(make: Any, count: int) -> dict[str, Any]:
    loader = make()
    start = time.perf_counter()
    tokens = 0
    for _ in range(count):
        tokens += int(next(loader)["tokens_lengths"].sum())
    seconds = time.perf_counter() - start
    loader.close()
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


# --------------------------------------------------------------------------- Grain


def grain_pipeline(data: dict[str, jb.Dataset], unit_weights: tuple, threads: int) -> Any:
    """Grain's mixture as its docs build one: each source a shuffled,
    repeated MapDataset, MapDataset.mix by weight, read by `threads`
    threads, then packed by FirstFitPackIterDataset into rows of
    ROW_LENGTH, ROWS_PER_BATCH bins. Yields packed rows."""
    import grain
    import grain.experimental

    logging.getLogger("absl").setLevel(logging.ERROR)
    parts = []
    for i, ds in enumerate(data.values()):
        values, offsets = (
            ds._core.column("tokens").copy_values().view(np.int32),
            np.zeros(len(ds) + 1, np.int64),
        )
        np.cumsum(ds.lengths(), out=offsets[1:])
        examples = [{"tokens": values[offsets[j] : offsets[j + 1]]} for j in range(len(ds))]
        parts.append(grain.MapDataset.source(examples).shuffle(seed=SEED + i).repeat())
    mixed = grain.MapDataset.mix(parts, list(unit_weights))
    read = mixed.to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=16))
    return grain.experimental.FirstFitPackIterDataset(
        read, length_struct={"tokens": ROW_LENGTH}, num_packing_bins=ROWS_PER_BATCH,
        shuffle_bins=False,
    )  # fmt: skip


def grain_rows(pipeline: Any, rows: int, k: int) -> tuple[np.ndarray, int]:
    """Real tokens per source per batch of ROWS_PER_BATCH rows, and the
    real tokens in all; checks every real token is a source's."""
    it = iter(pipeline)
    per_batch, batch = [], np.zeros(k, np.int64)
    total = 0
    for i in range(rows):
        row = next(it)
        real = row["tokens"][row["tokens_segment_ids"] > 0]
        source = real // TAG
        if real.size and (source.min() < 0 or source.max() >= k):
            raise AssertionError("Grain: a packed token is no source's")
        batch += np.bincount(source, minlength=k)
        total += real.size
        if (i + 1) % ROWS_PER_BATCH == 0:
            per_batch.append(batch)
            batch = np.zeros(k, np.int64)
    return np.array(per_batch), total


def by_hand(data: dict[str, jb.Dataset]) -> tuple[float, ...]:
    """Token weights turned into example weights as a Grain user would by
    hand: each weight over its source's mean length."""
    return tuple(w / ds.lengths().mean() for w, ds in zip(WEIGHTS, data.values(), strict=False))


def grain_rate(data: dict[str, jb.Dataset], count: int, threads: int) -> dict[str, Any]:
    pipeline = grain_pipeline(data, by_hand(data), threads)
    start = time.perf_counter()
    _, tokens = grain_rows(pipeline, count * ROWS_PER_BATCH, len(data))
    seconds = time.perf_counter() - start
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


# --------------------------------------------------------------------------- scale


def scale_worker(k: int, total: int, batches: int, which: str) -> dict[str, Any]:
    """In a fresh process: threads and peak RSS growth while `which`
    (jaxbatch or grain) yields `batches` batches over k sources."""
    data = sources(k, max(total // k, 1))
    # The peak from here on: Linux resets VmHWM to the current RSS.
    Path("/proc/self/clear_refs").write_text("5")
    rss_before = _status_mb("VmRSS")
    if which == "jaxbatch":
        mix = jb.Dataset.mix(data, unit="tokens")
        loader = jb.Loader(mix, planner(), seed=SEED, epochs=None, num_threads=THREADS)
        for _ in range(batches):
            next(loader)
        threads = _threads()
        state = len(json.dumps(loader.get_state()))
        loader.close()
    else:
        it = iter(grain_pipeline(data, (1.0,) * k, THREADS))
        for _ in range(batches * ROWS_PER_BATCH):
            next(it)
        threads = _threads()
        state = len(json.dumps(it.get_state(), default=str))
    growth = _status_mb("VmHWM") - rss_before
    return {"threads": threads, "rss_growth_mb": growth, "state_bytes": state}


def _status(key: str) -> int:
    """A /proc/self/status field's number (kB for sizes)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _status_mb(key: str) -> float:
    return _status(key) / 1024


def _threads() -> int:
    return _status("Threads")


def run_scale(k: int, total: int, batches: int, which: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--scale-worker", str(k), str(total), str(batches), which],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"scale worker (K={k}, {which}) failed:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    harness.add_arguments(p)
    p.add_argument("--scale-worker", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.scale_worker:
        k, total, batches, which = args.scale_worker
        print(json.dumps(scale_worker(int(k), int(total), int(batches), which)))
        return 0
    env = harness.check_load(args.force)
    reps = harness.repetitions(args)
    quick = args.quick
    count = QUICK_EXAMPLES if quick else EXAMPLES
    print(f"bench_mixture: {harness.describe(env)}; K=3 sources of {count:,} examples each")
    data = sources(3, count)
    result: dict[str, Any] = {"env": env, "reps": reps, "examples_per_source": count}

    # Shares.
    share_batches = QUICK_SHARE_BATCHES if quick else SHARE_BATCHES
    window = min(WINDOW, share_batches // 2)
    grain_batches = QUICK_GRAIN_BATCHES if quick else min(share_batches, GRAIN_SHARE_BATCHES)
    grain_window = min(window, grain_batches // 2)
    grain_per_batch, _ = grain_rows(
        grain_pipeline(data, WEIGHTS, THREADS), grain_batches * ROWS_PER_BATCH, 3
    )
    grain_hand, _ = grain_rows(
        grain_pipeline(data, by_hand(data), THREADS), grain_batches * ROWS_PER_BATCH, 3
    )
    shares = {
        'jaxbatch unit="tokens"': worst_window(
            mixture_shares(data, "tokens", share_batches), window
        ),  # fmt: skip
        'jaxbatch unit="examples"': worst_window(
            mixture_shares(data, "examples", share_batches), window
        ),
        "Grain mix + FirstFitPack, the weights on examples": worst_window(
            grain_per_batch, grain_window
        ),
        "Grain mix + FirstFitPack, weights / mean length (by hand)": worst_window(
            grain_hand, grain_window
        ),
    }
    result["shares"] = {
        "window_batches": window,
        "batches": share_batches,
        "grain_batches": grain_batches,
        "grain_window_batches": grain_window,
        "worst_pp": shares,
    }
    rows = [
        [
            "token shares vs weights 0.5/0.3/0.2",
            f"worst |share - weight| over {window}-batch windows",
        ]
    ]
    rows += [[name, f"{pp:.2f} pp"] for name, pp in shares.items()]
    print(harness.format_table(rows))

    # Padding.
    mix = jb.Dataset.mix(data, dict(zip(data, WEIGHTS, strict=True)), unit="tokens")
    with jb.Loader(mix, planner(), seed=SEED, epochs=None, num_threads=THREADS) as loader:
        for _ in range(share_batches):
            next(loader)
        mixed_eff = loader.stats.efficiency
        token_share = [loader.stats.sources[n].token_share for n in data]
    alone = []
    for ds in data.values():
        with jb.Loader(ds, planner(), seed=SEED, num_threads=THREADS) as loader:
            for _ in loader:
                pass
            alone.append(loader.stats.efficiency)
    alone_eff = float(np.dot(alone, token_share))
    result["padding"] = {"mixture": mixed_eff, "alone": alone, "alone_weighted": alone_eff}
    print(harness.format_table([
        ["padding efficiency (real / padded tokens)", "value"],
        ["mixture, packed together", f"{mixed_eff:.4f}"],
        ["each source packed alone (weighted by its token share)", f"{alone_eff:.4f}"],
    ]))  # fmt: skip

    # Throughput.
    timed = QUICK_TIMED_BATCHES if quick else TIMED_BATCHES
    grain_timed = QUICK_GRAIN_BATCHES if quick else GRAIN_TIMED_BATCHES
    single = jb.Dataset.concat(list(data.values()))
    contenders = {
        "jaxbatch mixture": lambda: loader_rate(
            lambda: jb.Loader(mix, planner(), seed=SEED, epochs=None, num_threads=THREADS), timed
        ),
        "jaxbatch one source": lambda: loader_rate(
            lambda: jb.Loader(single, planner(), seed=SEED, epochs=None, num_threads=THREADS), timed
        ),
        f"Grain mix + FirstFitPack, {THREADS} read threads": lambda: grain_rate(
            data, grain_timed, THREADS
        ),
        "Grain mix + FirstFitPack, caller's thread": lambda: grain_rate(data, grain_timed, 0),
    }
    runs = harness.alternate(contenders, reps)
    rates = {n: [r["tokens_per_s"] for r in rs] for n, rs in runs.items()}
    base = rates["jaxbatch mixture"]
    result["throughput"] = {
        n: {"tokens_per_s": harness.summary(r),
            "mixture_over": harness.summary([a / b for a, b in zip(base, r, strict=True)])}
        for n, r in rates.items()
    }  # fmt: skip
    rows = [["throughput (real tokens/s)", f"median (min-max), {reps} reps", "mixture / this"]]
    for name, r in rates.items():
        ratio = [a / b for a, b in zip(base, r, strict=True)]
        rows.append([name, harness.spread(r, ",.0f"), harness.spread(ratio) + "x"])
    print(harness.format_table(rows))

    # Scale.
    total = QUICK_SCALE_EXAMPLES if quick else SCALE_EXAMPLES
    batches = QUICK_SCALE_BATCHES if quick else SCALE_BATCHES
    scale = {}
    rows = [["K sources", f"{total:,} examples", "threads", "peak RSS growth MB", "state bytes"]]
    for which in ("jaxbatch", "grain"):  # --quick: in this process (its figures mean nothing)
        for k in SCALE_KS:
            r = (scale_worker if quick else run_scale)(k, total, batches, which)
            scale[f"{which} K={k}"] = r
            rows.append([str(k), which, str(r["threads"]), f"{r['rss_growth_mb']:.1f}",
                         f"{r['state_bytes']:,}"])  # fmt: skip
    result["scale"] = scale
    print(harness.format_table(rows))
    print(f"wrote {harness.write_json('bench_mixture', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

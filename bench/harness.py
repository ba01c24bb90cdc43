"""Noise control shared by the benchmarks.

A figure from a shared machine is only worth quoting with its spread, so
every benchmark built on this module:

- runs its contenders in alternating repetitions (a, b, c, a, b, c, ...), so
  a burst of load from elsewhere hits every contender alike rather than one;
- reports each figure as the median of the repetitions with its min-max;
- records the load average and refuses to start when it is above the core
  count (``--force`` overrides, and the result says so);
- has a ``--quick`` mode (tiny sizes, few repetitions) that exercises the
  benchmark and its correctness checks, not its timings;
- prints a plain table and writes JSON to ``bench/results/``.

Example::

    p = argparse.ArgumentParser()
    harness.add_arguments(p)
    args = p.parse_args(argv)
    env = harness.check_load(args.force)
    runs = harness.alternate({"a": run_a, "b": run_b}, harness.repetitions(args))
    print(harness.summary([r["seconds"] for r in runs["a"]]))
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_REPS = 5
MIN_REPS = 5
QUICK_REPS = 2


class LoadTooHigh(RuntimeError):
    """The machine is busier than it has cores: timings would mostly measure
    the other work."""


def add_arguments(parser: argparse.ArgumentParser, default_reps: int = DEFAULT_REPS) -> None:
    """``--reps``, ``--quick`` and ``--force``, the same in every benchmark."""
    parser.add_argument(
        "--reps",
        type=int,
        default=None,
        help=f"alternating repetitions (default {default_reps}; {QUICK_REPS} with --quick)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes and few repetitions: checks the benchmark runs and its "
        "correctness checks pass; its timings mean nothing",
    )
    parser.add_argument(
        "--force", action="store_true", help="run even when the load average is above the cores"
    )
    parser.set_defaults(_default_reps=default_reps)


def repetitions(args: argparse.Namespace) -> int:
    """The repetition count: ``--reps`` if given, else the default (at least
    MIN_REPS for a full run, QUICK_REPS for ``--quick``)."""
    if args.reps is not None:
        if args.reps < 1:
            raise ValueError(f"--reps must be >= 1, found {args.reps}")
        return args.reps
    if args.quick:
        return QUICK_REPS
    return max(getattr(args, "_default_reps", DEFAULT_REPS), MIN_REPS)


def cpu_model() -> str:
    """The processor's name (Linux's /proc/cpuinfo "model name", else what
    platform reports), to name the machine beside every figure."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def describe(env: Mapping[str, Any]) -> str:
    """One line naming the machine and its load: ``AMD EPYC, 2 cores, load
    average 0.41`` (with "forced" when it ran above the core count)."""
    text = f"{env['cpu']}, {env['cores']} cores, load average {env['load_average']:.2f}"
    return text + (" (forced: above the core count)" if env.get("forced") else "")


def check_load(force: bool, load: float | None = None, cores: int | None = None) -> dict[str, Any]:
    """The machine's state, to record with the results. Raises LoadTooHigh
    when the 1-minute load average is above the core count, unless ``force``.
    ``load`` and ``cores`` default to os.getloadavg() and os.cpu_count()."""
    load = os.getloadavg()[0] if load is None else float(load)
    cores = (os.cpu_count() or 1) if cores is None else int(cores)
    if load > cores and not force:
        raise LoadTooHigh(
            f"load average {load:.2f} is above the {cores} cores: the timings would measure "
            "the other work; wait, or pass --force (the result records it)"
        )
    return {
        "load_average": load,
        "cores": cores,
        "forced": bool(force and load > cores),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
    }


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median with its min-max spread and the number of values."""
    if not values:
        raise ValueError("summary: no values")
    return {
        "median": float(statistics.median(values)),
        "min": float(min(values)),
        "max": float(max(values)),
        "n": len(values),
    }


def order(names: Sequence[str], reps: int) -> list[tuple[int, str]]:
    """The alternating order: every contender once per repetition, in the
    given order: [(0, a), (0, b), (1, a), (1, b), ...]."""
    if reps < 1:
        raise ValueError(f"order: reps must be >= 1, found {reps}")
    if len(set(names)) != len(names):
        raise ValueError(f"order: contender names repeat: {list(names)}")
    return [(rep, name) for rep in range(reps) for name in names]


def alternate(
    contenders: Mapping[str, Callable[[], dict[str, Any]]],
    reps: int,
    progress: Callable[[int, str, dict[str, Any]], None] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Runs each contender ``reps`` times in the alternating order; each call
    returns a dict of measurements. Returns the dicts per contender, in order."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    for rep, name in order(list(contenders), reps):
        result = contenders[name]()
        runs[name].append(result)
        if progress is not None:
            progress(rep, name, result)
    return runs


def spread(values: Sequence[float], fmt: str = ".2f") -> str:
    """``median (min-max)`` as text."""
    s = summary(values)
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}-{s['max']:{fmt}})"


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, the first row the header, a rule beneath it."""
    if not rows:
        return ""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def write_json(name: str, result: Mapping[str, Any], directory: Path | None = None) -> Path:
    """Writes ``<directory>/<name>.json`` (default bench/results/)."""
    directory = RESULTS_DIR if directory is None else Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(result, indent=1))
    return path

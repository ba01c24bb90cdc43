"""The `jaxbatch` command line: `jaxbatch plan`, `jaxbatch run` and
`jaxbatch demo` (see jaxbatch._src.cli.run for the last two).

    jaxbatch plan [FILE | --default] [--column NAME] [--max-shapes K]
                  [--token-budget T] [--plot out.png] [--patch P]
    jaxbatch plan FILE --pack COLUMN=LENGTH [--pack COLUMN=LENGTH ...]
    jaxbatch plan GRAPHS.parquet [--graphs G] [--max-shapes K] [--multiple M]

compares PadToMax, power-of-two FixedBuckets, AutoBuckets and Pack on a data
set's lengths: padding efficiency, shapes (= compilations), batches and
planning time. A column of two variable axes (images: nested lists, tensor
types) is planned by each example's height and width instead: PadToMax,
AutoBuckets and, with --patch P, PatchPack of P x P patches, the budget
counting cells (pixels). With --pack it plans a Parquet/Arrow file's named list
columns jointly, each to its own row length (an encoder-decoder's inputs
and targets), and reports each feature's shape. A graph file (``senders``
and ``receivers`` list columns) gets the graph plan instead: the budget
fitted for G graph slots a batch and what GraphBudget and GraphBuckets make
of it (see jaxbatch._src.cli.plan_graphs).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from jaxbatch._src.base.optional import require
from jaxbatch._src.base.words import counted
from jaxbatch._src.cli.common import aligned_table, usage_error
from jaxbatch._src.cli.plan_graphs import WHO, file_schema, graph_plan_command, is_graph_file
from jaxbatch._src.data.default_data import pydoc_lengths
from jaxbatch._src.data.job_output import is_job_output
from jaxbatch._src.data.opening import open_source
from jaxbatch._src.execute.batch_loop import DEFAULT_MAX_SHAPES  # jb.run's too
from jaxbatch._src.load.loader import LoaderOptions
from jaxbatch._src.plan.plan import BatchPlan, plan
from jaxbatch._src.plan.planners import AutoBuckets, FixedBuckets, Pack, PadToMax, PatchPack

DEFAULT_TOKEN_BUDGET = 4096


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())


def load_lengths(path: str | None, column: str | None) -> tuple[np.ndarray, str]:
    """Lengths from a Parquet/Arrow file, a job's output folder, a text file
    (one example per line, whitespace tokens) or, with no path, the
    embedded pydoc default. The
    column of a Parquet/Arrow file follows the Loader's rule (the named
    one, else the first list column; it must be a list or large_list); a
    grid column (two variable axes) gives ``[n, 2]`` (height, width) sizes.
    ValueError or OSError naming the file for what cannot be planned."""
    if path is None:
        return pydoc_lengths(), "pydoc topics (embedded default), whitespace tokens"
    p = Path(path)
    job = is_job_output(p)  # A job's output folder (jb.tokenize's tokens) reads as a file.
    if not p.is_file() and not job:
        if p.is_dir():
            raise ValueError(f"{path} is a directory; expected a file or a job's output folder")
        if p.exists() or p.is_symlink():
            raise ValueError(f"{path} is not a regular file (a FIFO, device or symlink loop)")
        raise FileNotFoundError(f"no such file: {path}")
    if job or p.suffix.lower() in (".parquet", ".arrow", ".feather", ".ipc"):
        require("pyarrow", f"{WHO} reading {path}")
        # Opened as a Loader opens it, just the column to batch by.
        opened = open_source(p, LoaderOptions(column=column), who=WHO, lengths_only=True)
        name = opened.length_column
        grid = opened.dataset._core.column(name)
        if grid.is_grid:  # Images, pair features: planned by (h, w), as a Loader plans them.
            sizes = np.stack([grid.heights(), grid.widths()], axis=1)
            return sizes, f"{path}, column {name!r} (height x width)"
        return opened.dataset.lengths(name), f"{path}, column {name!r}"
    with open(p, encoding="utf-8", errors="replace") as f:
        lengths = np.array([len(line.split()) for line in f], dtype=np.int64)
    return lengths, f"{path}, one example per line, whitespace tokens"


def compare(
    lengths: np.ndarray, max_shapes: int, token_budget: int
) -> list[tuple[str, BatchPlan, float]]:
    """Plans the lengths with the four planners at one token budget."""
    longest = int(lengths.max()) if lengths.size else 1
    if token_budget < longest:
        raise ValueError(
            f"--token-budget {token_budget} is smaller than the longest example ({longest}); "
            f"raise it to at least {longest}"
        )
    row = _next_pow2(longest)
    pow2 = [1 << k for k in range(row.bit_length())]
    planners = [
        (f"PadToMax(batch_size={token_budget // longest})", PadToMax(token_budget // longest)),
        (f"FixedBuckets(powers of 2 to {row})", FixedBuckets(pow2, token_budget=token_budget)),
        (
            f"AutoBuckets(max_shapes={max_shapes})",
            AutoBuckets(max_shapes, token_budget=token_budget),
        ),
        (  # The budget's rows, spread over the batches the rows need (as a job plans it).
            f"Pack(row_length={row}, best_fit)",
            Pack(row, token_budget=max(row, token_budget), algorithm="best_fit"),
        ),
    ]
    return _timed(lengths, planners)


def compare_grid(
    sizes: np.ndarray, max_shapes: int, token_budget: int, patch: int | None
) -> list[tuple[str, BatchPlan, float]]:
    """Plans (height, width) sizes with the planners that take them, at one
    budget of cells a batch: PadToMax, AutoBuckets and, for a `patch`,
    PatchPack (rows of the next power of two of the most patches an image
    has; a partial last patch padded)."""
    largest = int((sizes[:, 0] * sizes[:, 1]).max())
    if token_budget < largest:
        raise ValueError(
            f"--token-budget {token_budget} is smaller than the largest example "
            f"({largest} cells); raise it to at least {largest}"
        )
    planners: list[tuple[str, PadToMax | AutoBuckets | PatchPack]] = [
        (f"PadToMax(batch_size={token_budget // largest})", PadToMax(token_budget // largest)),
        (
            f"AutoBuckets(max_shapes={max_shapes})",
            AutoBuckets(max_shapes, token_budget=token_budget),
        ),
    ]
    if patch is not None:
        PatchPack(1, patch=(patch, patch), rows_per_batch=1)  # The engine checks the patch first.
        patches = -(-sizes[:, 0] // patch) * -(-sizes[:, 1] // patch)
        row = _next_pow2(int(patches.max()))
        rows = max(1, token_budget // (row * patch * patch))
        planners.append(
            (
                f"PatchPack(patch=({patch}, {patch}), row_length={row})",
                PatchPack(row, patch=(patch, patch), rows_per_batch=rows, partial_patches="pad"),
            )
        )
    return _timed(sizes, planners)


def _timed(sizes: np.ndarray, planners) -> list[tuple[str, BatchPlan, float]]:
    results = []
    for name, planner in planners:
        start = time.perf_counter()
        p = plan(sizes, planner)
        results.append((name, p, time.perf_counter() - start))
    return results


def format_table(results: list[tuple[str, BatchPlan, float]]) -> str:
    header = ("planner", "real elements", "in used rows", "shapes", "batches", "plan ms")
    rows = [
        (
            name,
            f"{p.stats.efficiency:.1%}",
            f"{p.stats.row_efficiency:.1%}",
            str(p.stats.shapes),
            str(p.stats.batches),
            f"{seconds * 1e3:.2f}",
        )
        for name, p, seconds in results
    ]
    return aligned_table(header, rows)


def _pyplot():
    matplotlib = require("matplotlib", "jaxbatch plan --plot")
    matplotlib.use("Agg")
    return require("matplotlib.pyplot", "jaxbatch plan --plot")


def check_plot_path(out: str) -> None:
    """Refuses --plot OUT before any planning when OUT cannot be written:
    its folder missing, not a folder or not writable, or OUT a folder."""
    folder = Path(out).parent
    if not folder.is_dir():
        raise FileNotFoundError(f"--plot {out}: no such folder {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"--plot {out}: the folder {folder} is not writable")
    if Path(out).is_dir():
        raise IsADirectoryError(f"--plot {out} is a folder; expected a file name such as out.png")
    _pyplot()


def plot(lengths: np.ndarray, results, out: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    bins = np.unique(np.geomspace(1, int(lengths.max()) + 2, 80).astype(np.int64))
    ax.hist(np.maximum(lengths, 1), bins=bins, color="0.6", log=True)
    ax.set_xscale("log")
    styles = {"FixedBuckets": ("tab:blue", ":"), "AutoBuckets": ("tab:red", "-")}
    for name, p, _ in results:
        key = name.split("(")[0]
        if key not in styles:
            continue
        color, style = styles[key]
        for i, b in enumerate(p.boundaries):
            ax.axvline(b, color=color, linestyle=style, label=name if i == 0 else None)
    ax.set_xlabel("length (log)")
    ax.set_ylabel("examples (log)")
    ax.set_title("Length histogram and bucket boundaries")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def parse_pack(specs: list[str]) -> dict[str, int]:
    """{column: row length} from --pack COLUMN=LENGTH arguments."""
    row_lengths = {}
    for spec in specs:
        name, sep, length = spec.rpartition("=")
        if not sep or not name or not length.isdigit():
            raise ValueError(f"--pack {spec}: expected COLUMN=LENGTH, such as inputs=512")
        row_lengths[name] = int(length)
    return row_lengths


def _pack_features_command(args: argparse.Namespace) -> int:
    """Plans the named columns jointly and prints the plan and each feature's shape."""
    row_lengths = parse_pack(args.pack)
    suffix = Path(args.file).suffix.lower() if args.file else ""
    if suffix not in (".parquet", ".arrow", ".feather", ".ipc"):
        raise ValueError("--pack plans the list columns of a Parquet/Arrow FILE; give one")
    require("pyarrow", f"{WHO} reading {args.file}")
    names = file_schema(args.file).names
    missing = [n for n in row_lengths if n not in names]
    if missing:  # The flag's own words: which --pack names what.
        raise ValueError(
            f"--pack names column {missing[0]!r}, which {args.file} does not have; "
            f"its columns are {', '.join(map(repr, names))}"
        )
    ds = open_source(args.file, LoaderOptions(columns=list(row_lengths)), who=WHO).dataset
    rows = max(1, args.token_budget // sum(row_lengths.values()))
    planner = Pack(row_lengths, rows, algorithm="best_fit", too_long="truncate")
    p = plan(ds, planner)
    print(f"data: {args.file}, columns {', '.join(map(repr, row_lengths))}")
    print(f"planner: {planner.key}")
    print(p.stats)
    for shape in p.shapes:
        features = ", ".join(f"{n} [{shape.rows}, {n_len}]" for n, n_len in shape.feature_lengths)
        print(f"shape: {features}; {shape.segments} segments a row")
    return 0


def _plan_command(args: argparse.Namespace) -> int:
    if not args.default and is_graph_file(args.file):
        return graph_plan_command(args)
    args.max_shapes = DEFAULT_MAX_SHAPES if args.max_shapes is None else args.max_shapes
    args.token_budget = DEFAULT_TOKEN_BUDGET if args.token_budget is None else args.token_budget
    for flag, value in (("--graphs", args.graphs), ("--multiple", args.multiple)):
        if value is not None:
            raise ValueError(f"{flag} applies to graph data (senders and receivers columns) only")
    if args.pack:
        return _pack_features_command(args)
    if args.file is None and not args.default:
        raise ValueError("give a FILE or --default")
    if args.plot:
        check_plot_path(args.plot)
    lengths, source = load_lengths(None if args.default else args.file, args.column)
    if lengths.size == 0:
        raise ValueError(f"{source} holds no examples")
    if not lengths.any():
        raise ValueError(
            f"{source} holds {counted(lengths.size, 'example')}, all empty (0 tokens); "
            f"there is nothing to plan"
        )
    if lengths.ndim == 2:
        return _grid_plan(lengths, source, args)
    if args.patch is not None:
        raise ValueError(f"--patch plans a column of images (two variable axes); {source} is not")
    results = compare(lengths, args.max_shapes, args.token_budget)  # Refused before any output.
    print(f"data: {source}")
    print(
        f"{counted(lengths.size, 'example')}, {counted(int(lengths.sum()), 'element')}; "
        f"lengths: mean "
        f"{lengths.mean():.1f}, median {np.median(lengths):.0f}, max {lengths.max()}"
    )
    print(f"token budget {args.token_budget} elements per batch\n")
    print(format_table(results))
    print(
        "\nreal elements: real / padded elements, partial batches' padding rows included;"
        "\nin used rows: the same without those rows (the bucketing's own efficiency);"
        "\nshapes: distinct batch shapes = compilations under jax.jit."
    )
    if args.plot:
        plot(lengths, results, args.plot)
        print(f"\nplot written to {args.plot}")
    return 0


def _grid_plan(sizes: np.ndarray, source: str, args: argparse.Namespace) -> int:
    """The table for (height, width) sizes (see compare_grid)."""
    if args.plot:
        raise ValueError(f"--plot draws a length histogram; {source} is planned in two axes")
    results = compare_grid(sizes, args.max_shapes, args.token_budget, args.patch)
    areas = sizes[:, 0] * sizes[:, 1]
    print(f"data: {source}")
    print(
        f"{counted(len(sizes), 'example')}, {counted(int(areas.sum()), 'cell')}; "
        f"height: mean {sizes[:, 0].mean():.1f}, max {sizes[:, 0].max()}; "
        f"width: mean {sizes[:, 1].mean():.1f}, max {sizes[:, 1].max()}"
    )
    print(f"token budget {args.token_budget} cells per batch\n")
    print(format_table(results))
    print(
        "\nreal elements: real / padded cells (PatchPack: real / row patches), partial "
        "batches' padding rows included;\nin used rows: the same without those rows;"
        "\nshapes: distinct batch shapes = compilations under jax.jit."
    )
    return 0


def add_plan_parser(sub) -> None:
    """Adds `plan` to the `jaxbatch` command's subparsers."""
    p = sub.add_parser("plan", help="compare planners on a data set's lengths")
    p.add_argument("file", nargs="?", help="Parquet/Arrow file, or text with one example per line")
    p.add_argument("--default", action="store_true", help="use the embedded pydoc data set")
    p.add_argument("--column", help="list column of a Parquet/Arrow file (default: the first)")
    p.add_argument(
        "--max-shapes", type=int, metavar="K", help=f"default {DEFAULT_MAX_SHAPES}; graphs: 4"
    )
    p.add_argument("--token-budget", type=int, metavar="T", help=f"default {DEFAULT_TOKEN_BUDGET}")
    p.add_argument("--graphs", type=int, metavar="G", help="graph data: graph slots a batch (32)")
    p.add_argument(
        "--multiple", type=int, metavar="M", help="graph data: round node and edge slots up to M"
    )
    p.add_argument("--plot", metavar="OUT.png", help="draw the length histogram and boundaries")
    p.add_argument(
        "--patch", type=int, metavar="P", help="images: also plan PatchPack of P x P patches"
    )
    p.add_argument(
        "--pack",
        action="append",
        metavar="COLUMN=LENGTH",
        help="pack these columns jointly, each to its own row length (repeat it)",
    )
    p.set_defaults(handler=plan_command)


def plan_command(args) -> int:
    try:
        return _plan_command(args)
    except (ValueError, OSError, ImportError) as e:
        return usage_error("plan", e)

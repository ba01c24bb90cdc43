"""`jaxbatch run` and `jaxbatch demo`.

    jaxbatch run MODULE:FUNCTION --input FILE --output DIR [--column NAME]
                 [--planner auto|pad|pack] [--max-shapes K] [--token-budget T]
                 [--batch-size N] [--row-length L] [--checkpoint-every N]
                 [--on-error raise|skip|quarantine] [--check-finite]
                 [--overwrite] [--tag TAG] [--shard I/N [--elastic]] [--no-progress]

runs a per-example JAX function over a Parquet/Arrow/.npy source as a
resumable job (jb.run): re-running the same command after a crash resumes.
``MODULE`` is a dotted module name or a path to a ``.py`` file; a trailing
``()`` on FUNCTION calls it (a factory) to get the per-example function.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

from jaxbatch._src.base.choices import choices
from jaxbatch._src.cli.common import run_job
from jaxbatch._src.execute.batch_loop import DEFAULT_CPU_BATCH_SIZE, DEFAULT_MAX_SHAPES
from jaxbatch._src.job.job import DEFAULT_CHECKPOINT_EVERY, run
from jaxbatch._src.load.loader import LoaderOptions, OnError
from jaxbatch._src.plan.planners import AutoBuckets, Pack, PadToMax


def resolve_function(spec: str):
    """The callable named by ``MODULE:FUNCTION`` (``FUNCTION()`` calls a factory)."""
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected MODULE:FUNCTION, found {spec!r}")
    factory = attribute.endswith("()")
    attribute = attribute[:-2] if factory else attribute
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise ValueError(f"{spec}: no such file {path}")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[path.stem] = module
        module_spec.loader.exec_module(module)
    else:
        if "" not in sys.path:
            sys.path.insert(0, "")  # As `python -m`: modules in the working folder import.
        module = importlib.import_module(module_name)
    target = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{spec}: module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    fun = target() if factory else target
    if not callable(fun):
        raise ValueError(f"{spec}: {attribute!r} is not callable (found {type(fun).__name__})")
    return fun


def _planner(args):

    if args.planner == "pad":
        return PadToMax(args.batch_size or DEFAULT_CPU_BATCH_SIZE)
    if args.planner == "pack":
        if not args.row_length:
            raise ValueError("--planner pack needs --row-length")
        rows = args.batch_size or max(1, (args.token_budget or 65536) // args.row_length)
        return Pack(args.row_length, rows)
    if args.token_budget is None and args.batch_size is None:
        return None  # jb.run's default: AutoBuckets with a memory-planned batch size.
    return AutoBuckets(args.max_shapes, token_budget=args.token_budget, batch_size=args.batch_size)


def _shard(value: str | None):
    """--shard I/N (this process's index and the count), or "jax"."""
    if value is None or value == "jax":
        return value
    index, sep, count = value.partition("/")
    if not sep or not index.isdigit() or not count.isdigit():
        raise ValueError(f"--shard must be I/N (e.g. 0/4) or 'jax', found {value!r}")
    return int(index), int(count)


def parse_axes(specs: list[str] | None) -> dict[str, tuple[str, ...]] | None:
    """--axes COLUMN=A[,B] (repeated) as jb.run's axes=; the engine checks
    the names against the file's columns."""
    if not specs:
        return None
    axes = {}
    for spec in specs:
        column, sep, names = spec.partition("=")
        if not sep or not column or not all(names.split(",")):
            raise ValueError(
                f"--axes must be COLUMN=A or COLUMN=A,B (e.g. image=h,w), found {spec!r}"
            )
        if column in axes:
            raise ValueError(f"--axes names column {column!r} twice")
        axes[column] = tuple(names.split(","))
    return axes


def run_command(args) -> int:
    def job():
        return run(
            resolve_function(args.function),
            args.input,
            args.output,
            column=args.column,
            columns=args.columns.split(",") if args.columns else None,
            planner=_planner(args),
            checkpoint_every=args.checkpoint_every,
            on_error=args.on_error,
            check_finite=args.check_finite,
            overwrite=args.overwrite,
            tag=args.tag,
            progress=not args.no_progress,
            name=args.function,
            shard=_shard(args.shard),
            elastic=args.elastic,
            stream=args.stream,
            host_memory_limit=args.host_memory_limit,
            axes=parse_axes(args.axes),
        )

    return run_job("run", args.output, job)


def add_run_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a per-example JAX function over a data source as a resumable job",
        description=__doc__.split("\n\n")[2].strip(),
    )
    p.add_argument("function", metavar="MODULE:FUNCTION")
    p.add_argument("--input", required=True, help="Parquet/Arrow file or folder of .npy files")
    p.add_argument("--output", required=True, metavar="DIR", help="the job's output folder")
    p.add_argument("--column", help="the ragged column to batch by (default: the first)")
    p.add_argument("--columns", help="comma-separated columns to read (default: all)")
    p.add_argument("--planner", choices=("auto", "pad", "pack"), default="auto")
    p.add_argument("--max-shapes", type=int, default=DEFAULT_MAX_SHAPES, metavar="K")
    p.add_argument("--token-budget", type=int, metavar="T")
    p.add_argument("--batch-size", type=int, metavar="N")
    p.add_argument("--row-length", type=int, metavar="L", help="packed row length (--planner pack)")
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=DEFAULT_CHECKPOINT_EVERY,
        metavar="N",
        help=f"examples per output shard (default {DEFAULT_CHECKPOINT_EVERY})",
    )
    p.add_argument("--on-error", choices=choices(OnError), default=LoaderOptions.on_error)
    p.add_argument("--check-finite", action="store_true", help="set aside NaN/Inf outputs")
    p.add_argument("--overwrite", action="store_true", help="start over in a used folder")
    p.add_argument("--tag", help="a version the job is keyed on (e.g. the model's)")
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="this process's part of a job run on N processes (or 'jax': from "
        "jax.distributed); each writes its own folder in --output",
    )
    p.add_argument(
        "--elastic",
        action="store_true",
        help="continue a job --output holds that ran on another number of processes: the "
        "examples its parts committed are done, the rest are shared among these N",
    )
    p.add_argument(
        "--host-memory-limit",
        type=int,
        metavar="BYTES",
        help="bytes the loader may hold; a Parquet input decoding to more streams by row group",
    )
    p.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read a Parquet input by row group (default: when it exceeds --host-memory-limit)",
    )
    p.add_argument(
        "--axes",
        action="append",
        metavar="COLUMN=A[,B]",
        help="a column's variable axes, e.g. image=h,w (a grid) or pair=L,L with tokens=L "
        "(tied); repeat for each column",
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=run_command)

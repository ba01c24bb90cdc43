"""Planner descriptions: small frozen value types turned into core options."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxbatch import _core

_REMAINDER = ("pad", "keep", "drop")
_TOO_LONG = ("error", "truncate", "skip")
_ALGORITHMS = ("first_fit", "best_fit")


def _choice(planner: str, option: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{planner}: {option} must be one of {allowed}, found {value!r}")
    return value


_INT64_MAX = 2**63 - 1


def _count(planner: str, option: str, value: int | None) -> int:
    """An optional count as the core takes it (0 = not set): a positive
    integer that fits the core's int64."""
    if value is None:
        return 0
    try:
        ok = not isinstance(value, bool) and int(value) == value and 0 < value <= _INT64_MAX
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(
            f"{planner}: {option} must be a positive integer, found {value!r} (at most 2**63 - 1)"
        )
    return int(value)


def _boundaries(values: Sequence[int]) -> list[int]:
    out = []
    for k, b in enumerate(values):
        if isinstance(b, bool) or int(b) != b or not -_INT64_MAX <= b <= _INT64_MAX:
            raise ValueError(
                f"FixedBuckets: boundaries[{k}] must be an integer, found {b!r} (at most 2**63 - 1)"
            )
        out.append(int(b))
    return out


@dataclasses.dataclass(frozen=True)
class PadToMax:
    """Consecutive batches of ``batch_size``, each padded to its longest
    example rounded up to ``pad_to_multiple``: the usual hand-written baseline.
    Every distinct padded length is one more compilation. ``batch_size``
    must be a multiple of ``rows_multiple`` (for a kept remainder the last
    batch's rows are rounded up to it)."""

    batch_size: int
    pad_to_multiple: int = 1
    remainder: str = "pad"
    rows_multiple: int = 1

    def _options(self) -> _core.PadToMaxOptions:
        o = _core.PadToMaxOptions()
        o.batch_size = _count("PadToMax", "batch_size", self.batch_size)
        o.pad_to_multiple = _count("PadToMax", "pad_to_multiple", self.pad_to_multiple)
        o.remainder = getattr(
            _core.Remainder, _choice("PadToMax", "remainder", self.remainder, _REMAINDER)
        )
        o.rows_multiple = _count("PadToMax", "rows_multiple", self.rows_multiple)
        return o


@dataclasses.dataclass(frozen=True)
class FixedBuckets:
    """tf.data's ``bucket_by_sequence_length``: an example of length ``l`` goes
    to the first boundary ``>= l`` and is padded to it. Give ``batch_size``
    rows per batch, or ``token_budget`` elements per batch (a bucket of length
    ``L`` gets ``token_budget // L`` rows), or both (the smaller wins).
    ``rows_multiple`` makes every batch's row count a multiple of it: set
    ``jax.local_device_count()`` so each process's batch splits evenly over
    its devices (:func:`jaxbatch.global_batches`). A token budget's rows are
    rounded down to it, a kept remainder's rows up."""

    boundaries: Sequence[int]
    batch_size: int | None = None
    token_budget: int | None = None
    remainder: str = "pad"
    too_long: str = "error"
    rows_multiple: int = 1

    def _options(self) -> _core.FixedBucketsOptions:
        o = _core.FixedBucketsOptions()
        o.boundaries = _boundaries(self.boundaries)
        o.batch_size = _count("FixedBuckets", "batch_size", self.batch_size)
        o.token_budget = _count("FixedBuckets", "token_budget", self.token_budget)
        o.remainder = getattr(
            _core.Remainder, _choice("FixedBuckets", "remainder", self.remainder, _REMAINDER)
        )
        o.rows_multiple = _count("FixedBuckets", "rows_multiple", self.rows_multiple)
        o.too_long = getattr(
            _core.TooLong, _choice("FixedBuckets", "too_long", self.too_long, _TOO_LONG)
        )
        return o


@dataclasses.dataclass(frozen=True)
class AutoBuckets:
    """Chooses the bucket boundaries that minimise total padded elements with
    at most ``max_shapes`` distinct batch shapes (so at most that many
    compilations). Exact: dynamic programming over the length histogram.
    With ``token_budget`` each bucket of length ``L`` gets
    ``token_budget // L`` rows, so short sequences get big batches.
    ``rows_multiple`` makes every batch's row count a multiple of it: set
    ``jax.local_device_count()`` so each process's batch splits evenly over
    its devices (:func:`jaxbatch.global_batches`). A token budget's rows are
    rounded down to it, a kept remainder's rows up."""

    max_shapes: int
    token_budget: int | None = None
    batch_size: int | None = None
    pad_to_multiple: int = 1
    remainder: str = "pad"
    rows_multiple: int = 1

    def _options(self) -> _core.AutoBucketsOptions:
        o = _core.AutoBucketsOptions()
        o.max_shapes = _count("AutoBuckets", "max_shapes", self.max_shapes)
        o.token_budget = _count("AutoBuckets", "token_budget", self.token_budget)
        o.batch_size = _count("AutoBuckets", "batch_size", self.batch_size)
        o.pad_to_multiple = _count("AutoBuckets", "pad_to_multiple", self.pad_to_multiple)
        o.remainder = getattr(
            _core.Remainder, _choice("AutoBuckets", "remainder", self.remainder, _REMAINDER)
        )
        o.rows_multiple = _count("AutoBuckets", "rows_multiple", self.rows_multiple)
        return o


@dataclasses.dataclass(frozen=True)
class Pack:
    """Sequence packing: several examples per row of ``row_length``, marked by
    segment ids and positions. ``algorithm="best_fit"`` is best-fit decreasing
    (longest first, into the fullest row that fits), ``"first_fit"`` keeps
    input order. Rows stay open for ``lookahead`` examples (None: all). Or
    stream with ``open_rows``: at most that many rows open at once, examples
    in input order (best fit is then online, without sorting), and when an
    example fits no open row the fullest closes, so rows never close all at
    once at a window's end (Grain's ``num_packing_bins`` flush every bin).
    ``max_segments_per_row`` sizes the per-segment outputs
    (``example_index``, ``<column>_lengths``: ``[rows, S]``); by default S
    is the most examples a row can hold (the smallest lengths that fit one
    row), rounded up to a power of two: it depends on the lengths only, so
    every epoch and host gets the same shape. An example longer than
    ``row_length`` follows ``too_long``. ``rows_per_batch`` must be a
    multiple of ``rows_multiple`` (for a kept remainder the last batch's rows
    are rounded up to it)."""

    row_length: int
    rows_per_batch: int
    max_segments_per_row: int | None = None
    algorithm: str = "best_fit"
    lookahead: int | None = None
    too_long: str = "error"
    remainder: str = "pad"
    rows_multiple: int = 1
    open_rows: int | None = None

    def _options(self) -> _core.PackOptions:
        o = _core.PackOptions()
        o.row_length = _count("Pack", "row_length", self.row_length)
        o.rows_per_batch = _count("Pack", "rows_per_batch", self.rows_per_batch)
        o.max_segments_per_row = _count("Pack", "max_segments_per_row", self.max_segments_per_row)
        o.algorithm = getattr(
            _core.PackAlgorithm, _choice("Pack", "algorithm", self.algorithm, _ALGORITHMS)
        )
        o.lookahead = _count("Pack", "lookahead", self.lookahead)
        o.open_rows = _count("Pack", "open_rows", self.open_rows)
        o.too_long = getattr(_core.TooLong, _choice("Pack", "too_long", self.too_long, _TOO_LONG))
        o.remainder = getattr(
            _core.Remainder, _choice("Pack", "remainder", self.remainder, _REMAINDER)
        )
        o.rows_multiple = _count("Pack", "rows_multiple", self.rows_multiple)
        return o


Planner = PadToMax | FixedBuckets | AutoBuckets | Pack


# Options added after loader states and job folders first recorded planners:
# left out of planner_key at their defaults, so what was saved before still
# matches.
_ADDED_FIELDS = ("rows_multiple", "open_rows")


def planner_key(planner: Planner) -> str:
    """The planner's repr, stable across versions: a field added later is
    left out while it has its default (which plans as before it existed).
    Anything else (None, a choice still to be resolved) is its plain repr."""
    if not dataclasses.is_dataclass(planner):
        return repr(planner)
    parts = []
    for f in dataclasses.fields(planner):
        value = getattr(planner, f.name)
        if f.name in _ADDED_FIELDS and value == f.default:
            continue
        parts.append(f"{f.name}={value!r}")
    return f"{type(planner).__name__}({', '.join(parts)})"

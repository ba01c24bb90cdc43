"""Nulls in Arrow columns: which examples hold one, at any level of nesting.

A core column has no nulls, so an example that holds one (a null list, a
null fixed_size_list entry, a null value) is refused, naming it in the
numbering its user sees: its place in the file for a table read as it is,
its place in the indices mapping for a Hugging Face dataset, whose
``filter`` may well have left out exactly the rows with nulls (only the
rows the mapping selects are checked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from jaxbatch._src.base.optional import require
from jaxbatch._src.base.words import counted

# ---- pure logic: per row, the nulls of each level ------------------------------


def values_in_use(array: Any) -> tuple[np.ndarray, Any]:
    """A list array's offsets (int64, from 0) and its child cut to the
    values they cover: a sliced list's child still holds the values of the
    examples sliced away, whose nulls are not this column's."""
    offsets = np.asarray(array.offsets).astype(np.int64)
    if offsets.size == 0:
        return np.zeros(1, np.int64), array.values.slice(0, 0)
    first = int(offsets[0])
    offsets -= first
    return offsets, array.values.slice(first, max(0, int(offsets[-1])))


# How a level's positions map to the rows of the level above it.
_Up = Callable[[np.ndarray], np.ndarray]


def _levels(array: Any) -> list[tuple[Any, str, list[_Up]]]:
    """Each level of `array` (itself, then each list's or fixed_size_list's
    child, cut to the values its rows cover), what a null there is, and the
    maps from its positions up to `array`'s rows (innermost first)."""
    pa = require("pyarrow", "Dataset.from_arrow")
    levels = [(array, "top", [])]
    current, ups = array, []
    while True:
        if pa.types.is_list(current.type) or pa.types.is_large_list(current.type):
            offsets, child = values_in_use(current)

            def up(p: np.ndarray, offsets: np.ndarray = offsets) -> np.ndarray:
                return np.searchsorted(offsets, p, side="right") - 1

        elif pa.types.is_fixed_size_list(current.type):
            size = current.type.list_size
            child = current.values.slice(current.offset * size, len(current) * size)

            def up(p: np.ndarray, size: int = size) -> np.ndarray:
                return p // size

        else:
            return levels
        ups = [up, *ups]
        kind = "entry" if pa.types.is_fixed_size_list(child.type) else "value"
        levels.append((child, kind, ups))
        current = child


def _any_null(array: Any) -> bool:
    """Whether any level of `array` has a null, counting all of each list's
    child (a sliced list's child holds values beyond its rows): a quick "no"
    for the common case, without the offsets _levels reads."""
    pa = require("pyarrow", "Dataset.from_arrow")
    while True:
        if array.null_count:
            return True
        nested = pa.types.is_list(array.type) or pa.types.is_large_list(array.type)
        if not (nested or pa.types.is_fixed_size_list(array.type)):
            return False
        array = array.values


def null_counts(array: Any) -> list[tuple[int, np.ndarray, str, Any]]:
    """For each level of `array` that holds a null: its depth (0 for
    `array`), per row of `array` the nulls it holds there, what they are
    ("top", "entry" or "value") and the level's Arrow type. Empty when
    `array` has no null at any level."""
    if not _any_null(array):
        return []
    found = []
    for depth, (level, kind, ups) in enumerate(_levels(array)):
        if not level.null_count:
            continue
        positions = np.flatnonzero(np.asarray(level.is_null()))
        for up in ups:
            positions = up(positions)
        found.append((depth, np.bincount(positions, minlength=len(array)), kind, level.type))
    return found


# ---- messages -------------------------------------------------------------------


def _what(count: int, kind: str, arrow_type: Any) -> str:
    if kind == "top":
        return f"expected no nulls, found a null {arrow_type} in place of the example"
    if kind == "entry":
        entries = counted(count, "null entry", "null entries")
        return f"expected no nulls, found {entries} of {arrow_type}"
    return f"expected no null values, found {count} in it"


# ---- the check -----------------------------------------------------------------


def refuse_nulls(name: str, arrays: list, first_example: int, order: np.ndarray | None) -> None:
    """Raises ValueError naming the first example of `arrays` (a column's
    chunks, in order) that holds a null, and how many more do. Examples are
    numbered from `first_example` in the chunks' order, or, with `order`
    (example i is row order[i] of the chunks), by their place in `order`,
    and only the rows `order` selects are checked."""
    total = sum(len(a) for a in arrays)
    per_level: dict[int, tuple[np.ndarray, str, Any]] = {}  # by depth
    start = 0
    for array in arrays:
        for depth, counts, kind, arrow_type in null_counts(array):
            if depth not in per_level:
                per_level[depth] = (np.zeros(total, np.int64), kind, arrow_type)
            per_level[depth][0][start : start + len(array)] = counts
        start += len(array)
    if not per_level:
        return
    bad_rows = sum(counts for counts, _, _ in per_level.values()) > 0
    if order is None:
        bad = np.flatnonzero(bad_rows)
        rows, numbers = bad, bad + first_example
    else:
        inside = (order >= 0) & (order < total)  # the engine names those outside
        bad = np.flatnonzero(inside & bad_rows[np.where(inside, order, 0)])
        rows, numbers = order[bad], bad
    if bad.size == 0:
        return
    row = int(rows[0])
    # The outermost null names it: a null list's values are nobody's.
    counts, kind, arrow_type = per_level[min(d for d in per_level if per_level[d][0][row])]
    more = f" ({counted(bad.size - 1, 'other example')} with nulls too)" if bad.size > 1 else ""
    raise ValueError(
        f"column {name!r}, example {int(numbers[0])}: "
        f"{_what(int(counts[row]), kind, arrow_type)}{more}"
    )

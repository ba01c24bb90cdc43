"""Examples given one by one (dicts of arrays: a Grain window, a list of
dicts, a generator) as the columns ``Dataset.from_arrays`` takes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np


def records_columns(
    examples: Sequence[Any], first: int, who: str, fixed: Sequence[str] = ()
) -> dict[str, Any]:
    """The columns ``Dataset.from_arrays`` takes for `examples` (dicts of
    arrays, as Grain hands them over): per key, the examples' arrays as a
    list (ragged along their leading axis), or stacked when every value is
    a scalar (a fixed column, such as a label) or the key is in `fixed`.
    `first` is the stream position of examples[0], for errors, which start
    with `who`."""
    if not examples:
        raise ValueError(f"{who}: no examples; expected at least one dict (its keys name columns)")
    keys = _keys(examples[0], first, who)
    columns: dict[str, Any] = {}
    for key in keys:
        values = []
        for i, example in enumerate(examples):  # The window Grain gave, once per key.
            if not isinstance(example, Mapping) or key not in example:
                found = list(example) if isinstance(example, Mapping) else type(example).__name__
                raise ValueError(
                    f"{who}: example {first + i} lacks key {key!r}; every example "
                    f"must be a dict with the keys of example {first} {keys}, found {found}"
                )
            values.append(example[key])
        scalar = [np.ndim(v) == 0 and not isinstance(v, str | bytes) for v in values]
        if all(scalar) or key in fixed:
            columns[key] = np.asarray(values)
        elif any(scalar):
            bad = first + scalar.index(not scalar[0])
            raise ValueError(
                f"{who}: key {key!r} is a scalar in some examples and an array in "
                f"others (example {bad} differs from example {first}); expected one or the other"
            )
        else:
            columns[key] = values
    for i, example in enumerate(examples):  # Each has every key: an extra one would be lost.
        if len(example) != len(keys):
            extra = next(k for k in example if k not in columns)
            raise ValueError(
                f"{who}: example {first + i} has key {extra!r}, which example "
                f"{first} lacks; every example must have the keys {keys}"
            )
    return columns


def _keys(example: Any, position: int, who: str) -> list[str]:
    if not isinstance(example, Mapping) or not example:
        raise TypeError(
            f"{who}: example {position} is {type(example).__name__}; expected a "
            f"non-empty dict of numpy arrays (one per feature)"
        )
    return list(example)


def is_records(source: Any) -> bool:
    """Whether `source` is a list of dicts or a generator/iterator (of them,
    presumably): what a Loader reads through ``Dataset.from_examples``."""
    if isinstance(source, list | tuple):
        return len(source) > 0 and isinstance(source[0], Mapping)
    return isinstance(source, Iterator)

"""Integer arrays on their way to the engine, which counts in int64.

A uint64 value past 2**63 - 1 cast to int64 wraps to a negative number, and
every message after the cast (the engine's "expected a length >= 0, found
-9223372036854775803") would print that instead of what the user gave. Such
a value is refused here, before the cast, printed unsigned and named by its
place. The engine cannot do it: it never sees the unsigned value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

INT64_MAX = int(np.iinfo(np.int64).max)


def int64_array(values: Any, who: str, name: Callable[[int], str]) -> np.ndarray:
    """`values` (integers) as a C-contiguous int64 array; a ValueError for an
    unsigned value past INT64_MAX, naming it by ``name(flat position)``.

    Example::

        int64_array(np.array([3, 2**63], np.uint64), "plan", lambda k: f"example {k}'s length")
        # ValueError: plan: example 1's length is 9223372036854775808, past the largest
        # int64 (2**63 - 1)
    """
    array = np.asarray(values)
    if array.dtype.kind == "u" and array.size:
        flat = array.reshape(-1)
        past = flat > INT64_MAX
        if past.any():
            k = int(np.argmax(past))
            raise ValueError(
                f"{who}: {name(k)} is {int(flat[k])}, past the largest int64 (2**63 - 1)"
            )
    return np.ascontiguousarray(array, dtype=np.int64)

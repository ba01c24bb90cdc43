"""The loader benchmark's output contract: one batch plan, one set of arrays.

Every framework in bench_loader.py gets the same batches: the example index
lists of one jaxbatch plan (what jb.Loader yields as ``example_index``), and
must produce the same arrays from them, byte for byte:

  padded plan  ``tokens`` [rows, L] int32 (0-padded), ``tokens_mask`` [rows, L]
               bool, ``tokens_lengths`` [rows] int32, ``example_index`` [rows]
               int64; L is the smallest of the plan's boundaries that holds
               the batch's longest example; an empty row has index -1.
  packed plan  ``tokens``, ``tokens_segment_ids`` (1-based, 0 = padding),
               ``tokens_positions`` [rows, L] int32, ``tokens_lengths`` [rows,
               S] int32 and ``example_index`` [rows, S] int64 (-1 = no
               segment); L is the row length.

``reference_batch`` is the slow, obviously correct version (a loop over
examples) every framework's first batches are checked against;
``collate`` is the vectorised NumPy version the anchors run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

import numpy as np

Batch = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Tokens:
    """A ragged int32 column: example i is values[offsets[i]:offsets[i + 1]]."""

    values: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """One plan as every framework receives it.

    ``batches[b]`` holds batch b's example ids: shape [rows] for a padded
    plan, [rows, segments] for a packed one, -1 where a row (or segment) is
    empty. ``boundaries`` are the padded lengths a batch can have (for a
    packed plan, the row length alone)."""

    name: str
    planner: str
    packed: bool
    boundaries: np.ndarray
    batches: list[np.ndarray]

    def padded_length(self, lengths: np.ndarray) -> int:
        if self.packed:
            return int(self.boundaries[0])
        longest = int(lengths.max()) if lengths.size else 0
        return int(self.boundaries[np.searchsorted(self.boundaries, longest)])


def batch_stats(plan: BatchPlan, lengths: np.ndarray, ids: np.ndarray) -> dict[str, int]:
    """What one batch of the contract holds: examples, real tokens, padded
    elements (of the tokens array) and output bytes (all arrays)."""
    real = ids >= 0
    tokens = int(lengths[ids[real]].sum())
    rows = ids.shape[0]
    length = plan.padded_length(lengths[ids[real]])
    if plan.packed:
        per_row = rows * length * 3 * 4  # tokens, segment ids, positions
        per_segment = ids.size * (4 + 8)  # lengths, example_index
    else:
        per_row = rows * length * (4 + 1)  # tokens, mask
        per_segment = rows * (4 + 8)
    return {
        "examples": int(real.sum()),
        "tokens": tokens,
        "padded": rows * length,
        "bytes": per_row + per_segment,
    }


# --------------------------------------------------------------------------- reference


def reference_batch(tokens: Tokens, plan: BatchPlan, ids: np.ndarray) -> Batch:
    """The contract's arrays, one example at a time."""
    lengths = tokens.lengths
    length = plan.padded_length(lengths[ids[ids >= 0]])
    rows = ids.shape[0]
    if not plan.packed:
        out = np.zeros((rows, length), np.int32)
        mask = np.zeros((rows, length), bool)
        lens = np.zeros(rows, np.int32)
        for r, e in enumerate(ids.tolist()):
            if e < 0:
                continue
            x = tokens[e]
            out[r, : len(x)] = x
            mask[r, : len(x)] = True
            lens[r] = len(x)
        return {
            "tokens": out,
            "tokens_mask": mask,
            "tokens_lengths": lens,
            "example_index": ids.astype(np.int64),
        }
    out = np.zeros((rows, length), np.int32)
    seg = np.zeros((rows, length), np.int32)
    pos = np.zeros((rows, length), np.int32)
    lens = np.zeros(ids.shape, np.int32)
    for r in range(rows):
        used = 0
        for s, e in enumerate(ids[r].tolist()):
            if e < 0:
                continue
            x = tokens[e]
            out[r, used : used + len(x)] = x
            seg[r, used : used + len(x)] = s + 1
            pos[r, used : used + len(x)] = np.arange(len(x))
            lens[r, s] = len(x)
            used += len(x)
    return {
        "tokens": out,
        "tokens_segment_ids": seg,
        "tokens_positions": pos,
        "tokens_lengths": lens,
        "example_index": ids.astype(np.int64),
    }


def check_batch(name: str, k: int, got: Mapping[str, np.ndarray], want: Batch) -> None:
    """Raises AssertionError unless `got` has exactly `want`'s arrays: the same
    names, dtypes, shapes and bytes."""
    if sorted(got) != sorted(want):
        raise AssertionError(f"{name}: batch {k} has arrays {sorted(got)}, expected {sorted(want)}")
    for key, array in want.items():
        g = np.asarray(got[key])
        if g.dtype != array.dtype or g.shape != array.shape:
            raise AssertionError(
                f"{name}: batch {k} {key} is {g.dtype}{list(g.shape)}, expected "
                f"{array.dtype}{list(array.shape)}"
            )
        if g.tobytes() != array.tobytes():
            raise AssertionError(f"{name}: batch {k} {key} differs from the reference")


def check_stream(
    name: str, batches: Iterator[Mapping[str, np.ndarray]], reference: list[Batch]
) -> None:
    """The first len(reference) batches of `batches` equal the reference."""
    for k, want in enumerate(reference):
        try:
            got = next(batches)
        except StopIteration:
            raise AssertionError(f"{name}: ended after {k} batches") from None
        check_batch(name, k, got, want)


# --------------------------------------------------------------------------- vectorised


def gather_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Flat positions of the concatenated slices [starts[i], starts[i] + lengths[i])."""
    ends = np.cumsum(lengths)
    return np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) + np.repeat(
        starts - (ends - lengths), lengths
    )


class Collate:
    """The contract's arrays from a batch's ids, vectorised NumPy (no loop
    over examples): a gather of every real token and a masked store."""

    def __init__(self, tokens: Tokens, plan: BatchPlan):
        self.values = tokens.values
        self.offsets = tokens.offsets
        self.lengths = tokens.lengths
        self.plan = plan

    def __call__(self, ids: np.ndarray) -> Batch:
        real = ids >= 0
        flat = ids[real]  # row-major: each row's segments in order
        flat_lengths = self.lengths[flat]
        lengths = np.zeros(ids.shape, np.int32)
        lengths[real] = flat_lengths
        length = self.plan.padded_length(flat_lengths)
        rows = ids.shape[0]
        used = lengths.sum(axis=1) if self.plan.packed else lengths
        mask = np.arange(length, dtype=np.int32) < used[:, None]
        out = np.zeros((rows, length), np.int32)
        out[mask] = self.values[gather_index(self.offsets[flat], flat_lengths)]
        if not self.plan.packed:
            return {
                "tokens": out,
                "tokens_mask": mask,
                "tokens_lengths": lengths,
                "example_index": ids,
            }
        segments = np.broadcast_to(np.arange(1, ids.shape[1] + 1, dtype=np.int32), ids.shape)
        seg = np.zeros((rows, length), np.int32)
        seg[mask] = np.repeat(segments[real], flat_lengths)
        ends = np.cumsum(flat_lengths)
        pos = np.zeros((rows, length), np.int32)
        pos[mask] = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int32) - np.repeat(
            (ends - flat_lengths).astype(np.int32), flat_lengths
        )
        return {
            "tokens": out,
            "tokens_segment_ids": seg,
            "tokens_positions": pos,
            "tokens_lengths": lengths,
            "example_index": ids,
        }

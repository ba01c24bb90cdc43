"""The names collation gives a batch's arrays, as the engine spells them
(collator.h): one place, read from the binding, never written again here.

Example::

    batch[keys.mask("tokens")]           # batch["tokens_mask"]
    batch[keys.EXAMPLE_INDEX]            # batch["example_index"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxbatch import _core

MASK: str = _core.MASK_SUFFIX
LENGTHS: str = _core.LENGTHS_SUFFIX
SEGMENT_IDS: str = _core.SEGMENT_IDS_SUFFIX
POSITIONS: str = _core.POSITIONS_SUFFIX
# Packed batches': [rows, S] int32, each segment's first cell (unused slots:
# the end of the row's real tokens, not L), beside the per-segment LENGTHS.
SEGMENT_STARTS: str = _core.SEGMENT_STARTS_SUFFIX
# A PatchPack batch's: real pixels of each patch [rows, L], patches of each
# image [rows, S] (its per-segment lengths).
PIXELS: str = _core.PIXELS_SUFFIX
PATCHES: str = _core.PATCHES_SUFFIX
EXAMPLE_INDEX: str = _core.EXAMPLE_INDEX
# Pack(too_long="split")'s: which piece of its example each segment is.
EXAMPLE_PIECE: str = _core.EXAMPLE_PIECE
# A mixture's batches': each example's source, beside EXAMPLE_INDEX (its index there).
SOURCE_INDEX: str = _core.SOURCE_INDEX
# A job over one pass of a mixture (jb.run) keys its output rows on each
# draw's position in the stream, beside EXAMPLE_INDEX and SOURCE_INDEX.
POSITION = "position"
MIXTURE_KEYS = (POSITION, EXAMPLE_INDEX, SOURCE_INDEX)
# A graph batch's.
NODE_MASK: str = _core.NODE_MASK
EDGE_MASK: str = _core.EDGE_MASK
GRAPH_MASK: str = _core.GRAPH_MASK
NODE_GRAPH: str = _core.NODE_GRAPH
GRAPH_INDEX: str = _core.GRAPH_INDEX
GRAPH_KEYS = (NODE_MASK, EDGE_MASK, GRAPH_MASK, NODE_GRAPH, GRAPH_INDEX)
# What collation adds beside a ragged column's values.
SUFFIXES = (MASK, LENGTHS, SEGMENT_IDS, POSITIONS, SEGMENT_STARTS, PIXELS, PATCHES)
# Keys whose first per-row axis is the column's token (or patch) axis ("" the values).
TOKEN_SUFFIXES = ("", MASK, SEGMENT_IDS, POSITIONS, PIXELS)


def mask(column: str) -> str:
    return column + MASK


def lengths(column: str) -> str:
    return column + LENGTHS


def example_lengths(batch: Mapping[str, Any], column: str) -> str:
    """The key of each example's length in `column` of `batch`: a PatchPack
    batch's ``<column>_patches`` (an image's patches, per segment), else
    ``<column>_lengths``. Read from the batch's own keys, as collate made them."""
    patches = column + PATCHES
    return patches if patches in batch else lengths(column)


def segment_ids(column: str) -> str:
    return column + SEGMENT_IDS


def positions(column: str) -> str:
    return column + POSITIONS


def segment_starts(column: str) -> str:
    return column + SEGMENT_STARTS

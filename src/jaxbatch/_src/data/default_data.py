"""The embedded default data set: CPython's bundled pydoc topics.

`pydoc_data.topics` ships with every CPython, so it is always there and
needs no download. Its paragraphs, split into whitespace tokens, are a
real, skewed text length distribution (a long tail of long paragraphs).
"""

from __future__ import annotations

import numpy as np


def pydoc_paragraphs() -> list[str]:
    """The non-empty paragraphs of every pydoc topic, in a stable order."""
    from pydoc_data.topics import topics

    return [p for key in sorted(topics) for p in topics[key].split("\n\n") if p.strip()]


def pydoc_lengths() -> np.ndarray:
    """Whitespace-token counts of the pydoc paragraphs (int64)."""
    return np.array([len(p.split()) for p in pydoc_paragraphs()], dtype=np.int64)


def tokenize(paragraphs: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Whitespace tokens as int32 ids (a vocabulary in first-seen order) and
    int64 offsets: a ragged column's (values, offsets)."""
    vocab: dict[str, int] = {}
    ids: list[int] = []
    offsets = [0]
    for p in paragraphs:
        ids.extend(vocab.setdefault(w, len(vocab)) for w in p.split())
        offsets.append(len(ids))
    return np.array(ids, dtype=np.int32), np.array(offsets, dtype=np.int64)

"""Text to token ids with a Hugging Face ``tokenizers`` tokenizer, a batch
of documents at a time, into a ragged column (ids back to back, lengths).

The tokenizer's batch encoder does the per-document work in Rust threads,
with the GIL released. Python hands it the batch's strings and turns its
output into numpy without a Python-level loop over tokens: each Encoding's
ids come out as one list (a C-level ``map``), the lengths and the ids go
into numpy with ``np.fromiter`` (C loops), and documents set aside after
encoding are dropped with one boolean mask over the tokens.

A document is set aside, with its kind and reason, when it has no text
(null, or not a text: see data/text.py), when the tokenizer fails on it
(found by encoding the batch's documents one by one, only for a batch whose
batch encoding failed), when it gives no token besides the special tokens
(an empty or blank text), or when it has more than ``max_length`` tokens
and truncation is off.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import os
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.optional import require
from jaxbatch._src.data.text import TextBatch

# The integer types a token column may have by default, smallest first: the
# first that holds the vocabulary's largest id is chosen.
_DEFAULT_DTYPES = (np.uint8, np.uint16, np.int32, np.int64)
# Kinds of documents set aside (the report counts skipped ones by kind).
NO_TEXT, NOT_TEXT, FAILED, EMPTY, TOO_LONG = (
    "no text",
    "not text",
    "tokenizer error",
    "empty",
    "too long",
)


@dataclasses.dataclass(frozen=True)
class Encoded:
    """A batch's kept documents (their indices, int64), their token counts
    (int64) and their ids back to back; and the documents set aside, as
    (index, kind, reason), in index order."""

    documents: np.ndarray
    lengths: np.ndarray
    ids: np.ndarray
    bad: list[tuple[int, str, str]]


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A batch made ready for the encoder: the index of its first document,
    the strings to encode, the positions in the batch of the documents they
    are, and the documents set aside so far (position: (kind, reason))."""

    first: int
    strings: list[str]
    positions: np.ndarray
    bad: dict[int, tuple[str, str]]


class Encoder:
    """A tokenizer set up for a job: never padding, truncating to
    ``max_length`` only with ``truncation``, adding special tokens or not;
    and the token column's dtype. The tokenizer given is copied, not changed.

    Example::

        encoder = Encoder("tokenizer.json", dtype=None, add_special_tokens=True,
                          max_length=512, truncation=True, who="jb.tokenize")
        encoded = encoder.encode(batch, "no text (null)")
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        dtype: Any,
        add_special_tokens: bool,
        max_length: int | None,
        truncation: bool,
        who: str,
    ):
        self.who = who
        self.tokenizer = _copy(tokenizer, who)
        self.add_special_tokens = bool(add_special_tokens)
        self.truncation = bool(truncation)
        self.max_length = max_length
        self.special = (
            self.tokenizer.num_special_tokens_to_add(False) if self.add_special_tokens else 0
        )
        _check_length(max_length, self.truncation, self.special, who)
        self.tokenizer.no_padding()
        if self.truncation:
            self.tokenizer.enable_truncation(max_length)
        else:
            self.tokenizer.no_truncation()
        vocabulary = self.tokenizer.get_vocab(with_added_tokens=True)
        self.largest_id = max(vocabulary.values(), default=0)
        self.dtype = token_dtype(dtype, self.largest_id, len(vocabulary), who)
        # Newer tokenizers skip the offsets (which are not kept) in a fast
        # variant of the batch encoder; its ids are the same.
        self._encode_batch = getattr(
            self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch
        )

    @property
    def fingerprint(self) -> str:
        """The tokenizer as set up (its whole JSON: vocabulary, normalizer,
        pre-tokenizer, model, post-processor, truncation), hashed."""
        return f"{_core.hash64(self.tokenizer.to_str().encode()):016x}"

    def encode(self, batch: TextBatch, null_reason: str) -> Encoded:
        """The batch's documents as token ids (see the module): prepare,
        encode_texts and finish in a row."""
        prepared = self.prepare(batch, null_reason)
        try:
            encodings = self.encode_texts(prepared.strings)
        except Exception:  # noqa: BLE001 - the tokenizer raises plain Exception
            encodings = None
        return self.finish(prepared, encodings)

    def prepare(self, batch: TextBatch, null_reason: str) -> Prepared:
        """The batch's texts as the Python strings the encoder takes, its
        documents without text set aside."""
        pa = require("pyarrow", self.who)
        texts = batch.texts
        bad: dict[int, tuple[str, str]] = {i: (NOT_TEXT, p) for i, p in batch.problems.items()}
        null = np.asarray(texts.is_null().to_numpy(zero_copy_only=False), bool)
        for i in np.flatnonzero(null):  # A loop over null documents only.
            bad.setdefault(int(i), (NO_TEXT, null_reason))
        keep = ~null
        strings = (texts if keep.all() else texts.filter(pa.array(keep))).to_pylist()
        return Prepared(batch.first, strings, np.flatnonzero(keep), bad)

    def encode_texts(self, strings: list[str]) -> list:
        """The tokenizer's batch encoder over `strings` (in its own threads,
        the GIL released: another thread may prepare or finish meanwhile);
        raises what the tokenizer raises."""
        return self._encode_batch(strings, add_special_tokens=self.add_special_tokens)

    def finish(self, prepared: Prepared, encodings: list | None) -> Encoded:
        """The ids of a prepared batch from its Encodings; None where the
        batch encoder failed: each string is then encoded alone to find
        those the tokenizer fails on, which are set aside."""
        bad, positions = prepared.bad, prepared.positions
        if encodings is None:
            encodings, positions = self._encode_each(prepared.strings, positions, bad)
        ids = list(map(operator.attrgetter("ids"), encodings))
        lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), self.dtype, count=int(lengths.sum()))
        drop = self._set_aside_by_length(lengths, positions, bad)
        if drop.any():
            flat = flat[np.repeat(~drop, lengths)]
            lengths, positions = lengths[~drop], positions[~drop]
        kept = prepared.first + positions.astype(np.int64)
        set_aside = [(prepared.first + i, kind, why) for i, (kind, why) in sorted(bad.items())]
        return Encoded(kept, lengths, flat, set_aside)

    def _encode_each(
        self, strings: list[str], positions: np.ndarray, bad: dict
    ) -> tuple[list, np.ndarray]:
        """Each string's Encoding, and the positions of the documents they
        are: those the tokenizer fails on are set aside."""
        encodings, ok = [], np.ones(len(strings), bool)
        for j, text in enumerate(strings):
            try:
                encodings.append(
                    self.tokenizer.encode(text, add_special_tokens=self.add_special_tokens)
                )
            except Exception as e:  # noqa: BLE001 - the tokenizer raises plain Exception
                ok[j] = False
                bad[int(positions[j])] = (FAILED, f"the tokenizer failed: {e}")
        return encodings, positions[ok]

    def _set_aside_by_length(
        self, lengths: np.ndarray, positions: np.ndarray, bad: dict
    ) -> np.ndarray:
        """Marks documents with no token of their own, or too many, as bad;
        returns which of the encoded documents they are."""
        empty = lengths <= self.special
        over = np.zeros_like(empty)
        if self.max_length is not None and not self.truncation:
            over = lengths > self.max_length
        for j in np.flatnonzero(empty):
            bad[int(positions[j])] = (EMPTY, "no tokens (an empty or blank text)")
        for j in np.flatnonzero(over):
            bad[int(positions[j])] = (
                TOO_LONG,
                f"{int(lengths[j])} tokens, over max_length={self.max_length} (pass "
                f"truncation=True to cut it instead)",
            )
        return empty | over


# -- The tokenizer and the options, checked -------------------------------------


def _copy(tokenizer: Any, who: str) -> Any:
    """A ``tokenizers.Tokenizer`` of its own from a Tokenizer, a
    transformers fast tokenizer (its backend_tokenizer) or the path of a
    tokenizer.json."""
    tokenizers = require("tokenizers", who)
    if isinstance(tokenizer, str | os.PathLike):
        path = os.fspath(tokenizer)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{who}: no such tokenizer file: {path}")
        try:
            return tokenizers.Tokenizer.from_file(path)
        except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception
            raise ValueError(
                f"{who}: cannot read {path} as a tokenizers tokenizer (a tokenizer.json): {e}"
            ) from e
    backend = getattr(tokenizer, "backend_tokenizer", None)  # transformers' fast tokenizers
    if isinstance(backend, tokenizers.Tokenizer):
        tokenizer = backend
    if not isinstance(tokenizer, tokenizers.Tokenizer):
        raise TypeError(
            f"{who}: expected a tokenizers.Tokenizer, a transformers fast tokenizer or the "
            f"path of a tokenizer.json, found {type(tokenizer).__name__}"
        )
    try:  # Its JSON is also what keys the job: a tokenizer without one cannot be keyed.
        return tokenizers.Tokenizer.from_str(tokenizer.to_str())
    except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception
        raise ValueError(
            f"{who}: the tokenizer cannot be written as JSON (a component written in Python?), "
            f"which keys the job and copies it: {e}"
        ) from e


def _check_length(max_length: Any, truncation: bool, special: int, who: str) -> None:
    if max_length is None:
        if truncation:
            raise ValueError(f"{who}: truncation=True needs max_length= (tokens a document keeps)")
        return
    if isinstance(max_length, bool) or not isinstance(max_length, int | np.integer):
        raise ValueError(f"{who}: max_length must be an int, found {max_length!r}")
    if max_length <= special:
        raise ValueError(
            f"{who}: max_length={max_length} leaves no room for text beside the tokenizer's "
            f"{special} special tokens; expected more than {special}"
        )


def token_dtype(dtype: Any, largest_id: int, vocabulary: int, who: str) -> np.dtype:
    """The token column's dtype: `dtype`, checked to hold every id of the
    vocabulary, or (None) the smallest of uint8, uint16, int32 and int64
    that does."""
    if dtype is None:
        return next(np.dtype(d) for d in _DEFAULT_DTYPES if np.iinfo(d).max >= largest_id)
    try:
        chosen = np.dtype(dtype)
    except TypeError as e:
        raise ValueError(f"{who}: dtype={dtype!r} is not a numpy dtype") from e
    if chosen.kind not in "iu":
        raise ValueError(f"{who}: dtype must be an integer type for token ids, found {chosen}")
    if np.iinfo(chosen).max < largest_id:
        raise ValueError(
            f"{who}: dtype={chosen} cannot hold the tokenizer's ids: its vocabulary of "
            f"{vocabulary} tokens has ids up to {largest_id}, and {chosen} holds at most "
            f"{np.iinfo(chosen).max}"
        )
    return chosen

"""Mixtures: named sources drawn by weight into one stream (the engine's
load/mixture.h). Python only names the sources and their weights; the
engine validates them, draws the stream, plans it block by block and keeps
its state."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from jaxbatch import _core
from jaxbatch._src.data.dataset import (
    Columns,
    Dataset,
    mapped_files,
    register_mixture,
    set_mapped_files,
)
from jaxbatch._src.data.records import is_records
from jaxbatch._src.data.sources import open_path
from jaxbatch._src.integrations.huggingface import is_huggingface_dataset

Unit = Literal["tokens", "examples"]
Exhaustion = Literal["restart", "stop", "drop"]
#: Shares by source name, or stages: ``[(start, {name: share}), ...]``.
Weights = Mapping[str, float] | Sequence[tuple[int, Mapping[str, float]]]


@dataclasses.dataclass(frozen=True)
class SourceShare:
    """One source's part of what a Loader over a mixture has yielded:
    ``examples`` (a split example counts once) and ``tokens`` (real
    elements: tokens, a grid's cells, a graph's nodes), each also as a share
    of all sources', beside ``weight``, the share the mixture asks for in
    the block the loader is in (of examples or of tokens, by its unit)."""

    examples: int
    tokens: int
    example_share: float
    token_share: float
    weight: float


class Mixture(Columns):
    """Named sources drawn by weight into one stream, for a :class:`Loader`.

    Made by ``jb.Dataset.mix(sources, weights, unit)``. ``sources`` maps a
    name to a :class:`Dataset` (a view too), a Hugging Face dataset, a path
    (read whole: an Arrow file or .npy folder memory-mapped, a Parquet file
    decoded into memory; never streamed) or a list of dicts; all need the same
    columns. ``weights`` maps each name to a share (any scale; None: equal),
    or lists stages ``[(start, {name: share}), ...]``: each stage's shares
    hold from position ``start`` (a multiple of ``block_size``; the first
    is 0) on. ``unit="tokens"`` weighs sources by their examples' real
    elements (what the planner's length column holds), ``"examples"`` by
    examples, as Grain, tf.data and seqio do.

    Each source is read in its own order, shuffled per source epoch under a
    key of the Loader's ``seed`` and the source's name. ``exhaustion`` says
    what a source that runs out does: ``"restart"`` (a new, reshuffled pass
    over it; the stream then ends after ``epochs`` times all the sources'
    examples, or never with ``epochs=None``), ``"stop"`` (the stream ends
    when a run-out source is drawn) or ``"drop"`` (it is left out and the
    others keep their ratio; the stream ends when all are out); with
    ``"stop"`` or ``"drop"`` ``epochs`` must be 1.

    The Loader plans the stream ``block_size`` positions (draws) at a time,
    in the order drawn, so the shares hold in every window up to one block;
    batches carry ``source_index`` beside ``example_index`` (which then
    numbers examples within their source), and ``loader.stats.sources`` the
    realised shares. Its state is a few integers per source; restored into
    a mixture of other weights or sources (by name), it finishes the block
    it was saved in, then continues with the new one, each source's draws
    where they were (see docs/mixtures.md).

    Example::

        mix = jb.Dataset.mix({"web": web, "code": code}, weights={"web": 0.7, "code": 0.3},
                             unit="tokens")
        loader = jb.Loader(mix, jb.Pack(2048, rows_per_batch=8), seed=0, epochs=None)
    """

    def __init__(
        self,
        sources: Mapping[str, Any],
        weights: Weights | None = None,
        *,
        unit: Unit = "examples",
        exhaustion: Exhaustion = _core.DEFAULT_EXHAUSTION,
        block_size: int = _core.DEFAULT_MIXTURE_BLOCK,
    ):
        if not isinstance(sources, Mapping) or not sources:
            raise ValueError(
                "Dataset.mix: expected a dict of sources by name ({'web': web, ...}), found "
                f"{type(sources).__name__ if not isinstance(sources, Mapping) else 'an empty one'}"
            )
        self.names = [str(name) for name in sources]
        self.sources = [_as_dataset(name, s) for name, s in sources.items()]
        self.unit, self.exhaustion, self.block_size = unit, exhaustion, block_size
        self.stages = _stages(weights, self.names)
        for option, value in (("unit", unit), ("exhaustion", exhaustion)):
            if not isinstance(value, str):
                raise ValueError(f"Dataset.mix: {option} must be a str, found {value!r}")
        if isinstance(block_size, bool) or not isinstance(block_size, int):
            raise ValueError(f"Dataset.mix: block_size must be an int, found {block_size!r}")
        self._mixture = _core.make_mixture(
            self.names, [d._core for d in self.sources], self.stages, unit, exhaustion, block_size
        )
        # Columns, dtypes and kinds (what a Loader asks) are the first source's:
        # the engine checked every source has the same.
        self._core = self.sources[0]._core
        set_mapped_files(self, dict.fromkeys(f for d in self.sources for f in mapped_files(d)))
        layout = getattr(self.sources[0], "_graph_layout", None)
        if layout is not None:
            self._graph_layout = layout

    @property
    def num_examples(self) -> int:
        """Every source's examples together."""
        return sum(len(d) for d in self.sources)

    def __len__(self) -> int:
        return self.num_examples

    def __repr__(self) -> str:
        shares = self.stages[0][1]
        total = sum(shares)
        parts = ", ".join(
            f"{n}: {len(d)} examples, {w / total:.1%}"
            for n, d, w in zip(self.names, self.sources, shares, strict=True)
        )
        staged = f", {len(self.stages)} stages" if len(self.stages) > 1 else ""
        return f"Mixture({parts}; unit={self.unit!r}, exhaustion={self.exhaustion!r}{staged})"


def _as_dataset(name: str, source: Any) -> Dataset:
    """A source as the engine reads it: a Dataset (read whole)."""
    who = f"Dataset.mix: source {name!r}"
    if isinstance(source, Dataset):
        return source
    if isinstance(source, Mixture):
        raise TypeError(f"{who} is a mixture; mix its sources into one mixture instead")
    if is_huggingface_dataset(source):
        return Dataset.from_huggingface(source)
    if isinstance(source, str | os.PathLike):
        return open_path(source, None, None, None, who)
    if is_records(source):
        return Dataset.from_examples(source)
    raise TypeError(
        f"{who}: expected a jb.Dataset, a Hugging Face dataset, a path or a list of dicts, found "
        f"{type(source).__name__}"
    )


def _stages(weights: Weights | None, names: list[str]) -> list[tuple[int, list[float]]]:
    """(start, shares in `names`' order) per stage; the engine checks the
    values (>= 0, finite, one positive, starts on block boundaries)."""
    if weights is None:
        return [(0, [1.0] * len(names))]
    if isinstance(weights, Mapping):
        return [(0, _shares(weights, names, "weights"))]
    if not isinstance(weights, Sequence) or isinstance(weights, str):
        raise ValueError(
            f"Dataset.mix: weights must be a dict of shares by source name or a list of "
            f"(start, dict) stages, found {type(weights).__name__}"
        )
    stages = []
    for k, stage in enumerate(weights):
        if not (isinstance(stage, tuple | list) and len(stage) == 2):
            raise ValueError(
                f"Dataset.mix: stage {k} must be (start, {{name: share}}), found {stage!r:.80}"
            )
        start, shares = stage
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < 2**63:
            raise ValueError(f"Dataset.mix: stage {k} starts at {start!r}; expected an int >= 0")
        stages.append((start, _shares(shares, names, f"stage {k}")))
    return stages


def _shares(shares: Any, names: list[str], what: str) -> list[float]:
    if not isinstance(shares, Mapping):
        raise ValueError(
            f"Dataset.mix: {what} must be a dict of shares by source name, found "
            f"{type(shares).__name__}"
        )
    unknown = [n for n in shares if n not in names]
    if unknown:
        raise ValueError(
            f"Dataset.mix: {what} names source {unknown[0]!r}, which is not one of {names}"
        )
    missing = [n for n in names if n not in shares]
    if missing:
        raise ValueError(
            f"Dataset.mix: {what} gives no weight for source {missing[0]!r}; give every source "
            f"one (0 leaves it out)"
        )
    out = []
    for n in names:
        value = shares[n]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(
                f"Dataset.mix: {what}: the weight of {n!r} must be a number, found {value!r}"
            )
        out.append(float(value))
    return out


def source_shares(loader_state: Any) -> dict[str, SourceShare]:
    """Each source's realised share from a core LoaderState (its mixture
    part); {} for a loader over one dataset."""
    rows = loader_state.mixture_sources
    return {} if rows is None else shares_of(rows)


def shares_of(rows: Iterable[tuple[str, int, int, int]]) -> dict[str, SourceShare]:
    """Each source's share from its (name, examples, tokens, weight): what a
    Loader's state holds, or what a job over one pass wrote."""
    rows = list(rows)
    examples = sum(r[1] for r in rows) or 1
    tokens = sum(r[2] for r in rows) or 1
    weights = sum(r[3] for r in rows) or 1
    return {
        name: SourceShare(n, t, n / examples, t / tokens, w / weights) for name, n, t, w in rows
    }


register_mixture(Mixture)

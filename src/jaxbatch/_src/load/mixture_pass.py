"""One pass of a mixture's stream as examples to process once (jb.run, jb.map).

A :class:`Loader` over a mixture draws its sources by weight, block by
block. jb.run and jb.map process one pass of that stream: the engine draws
it (``Loader.draw_mixture_pass``: the draws, in the order, that a
``jb.Loader(mixture, ..., seed=seed, epochs=1)`` yields), and it becomes a
view, the sources laid end to end with the drawn examples selected in draw
order, which they plan, run, journal and resume as any dataset. Position
``p`` of the view is draw ``p``; its source and its example there map each
output back. With ``exhaustion="restart"`` a source that runs out is drawn
again (its next, reshuffled pass), so a small source's examples repeat:
that is the stream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.data.mixture import Mixture, SourceShare, shares_of
from jaxbatch._src.load.loader import ColumnSchema, Loader, LoaderOptions
from jaxbatch._src.plan.planners import PadToMax

#: The Loader's seed default, which a pass is drawn with unless told.
DEFAULT_SEED = LoaderOptions().seed


@dataclasses.dataclass(frozen=True)
class DrawnPass:
    """One pass of `mixture`'s stream under `seed`: ``dataset`` (the view;
    its example ``p`` is draw ``p``), and per position its ``sources``
    (int32), its ``examples`` (the index within its source) and its
    ``tokens`` (real elements, as the Loader counts them), with the
    ``weights`` of the pass's last block (the engine's integers)."""

    mixture: Mixture
    seed: int
    dataset: Dataset
    sources: np.ndarray
    examples: np.ndarray
    tokens: np.ndarray
    weights: list[int]

    def tally(self, positions: np.ndarray) -> dict[str, list[int]]:
        """Examples and tokens per source (in the mixture's order) among the
        draws at `positions`: what a shard record of a job keeps."""
        count = len(self.mixture.names)
        positions = np.asarray(positions, np.int64)
        sources = self.sources[positions]
        tokens = np.zeros(count, np.int64)  # Summed as integers: bincount's weights are floats.
        np.add.at(tokens, sources, self.tokens[positions])
        return {
            "examples": np.bincount(sources, minlength=count).tolist(),
            "tokens": tokens.tolist(),
        }

    def shares(self, tallies: list[dict[str, list[int]]]) -> dict[str, SourceShare]:
        """Each source's realised share from tallies (:meth:`tally`) added up."""
        examples = [sum(t["examples"][s] for t in tallies) for s in range(len(self.weights))]
        tokens = [sum(t["tokens"][s] for t in tallies) for s in range(len(self.weights))]
        return shares_of(zip(self.mixture.names, examples, tokens, self.weights, strict=True))

    def key(self) -> dict[str, Any]:
        """What a job over the pass is keyed on beside its input (the view's
        fingerprint, which already covers the draws): each option by name,
        so a resume with other weights or another seed is refused naming it."""
        m = self.mixture
        return {
            "mixture_sources": [
                [name, f"{_core.dataset_fingerprint(d._core):016x}", len(d)]
                for name, d in zip(m.names, m.sources, strict=True)
            ],
            "mixture_weights": [[start, list(shares)] for start, shares in m.stages],
            "mixture_unit": m.unit,
            "mixture_exhaustion": m.exhaustion,
            "mixture_block_size": m.block_size,
            "seed": self.seed,
        }


def draw_pass(
    mixture: Mixture,
    planner: Any,
    *,
    seed: int | None,
    column: str | None,
    schema: Mapping[str, ColumnSchema] | None,
    who: str,
) -> DrawnPass:
    """One pass of `mixture` as a Loader with these options draws it: the
    planner's kind (a graph planner counts nodes), the length column and
    the schema (a bad record weighs no tokens) are what change the draws.
    Any other planner draws what PadToMax draws."""
    seed = DEFAULT_SEED if seed is None else seed
    loader = Loader(
        mixture,
        planner if planner is not None else PadToMax(batch_size=1),
        seed=seed,
        epochs=1,
        column=column,
        schema=schema,
        num_threads=1,
        prefetch=1,
        who=who,
    )
    try:
        sources, examples, tokens, weights = loader._core_loader.draw_mixture_pass()
    finally:
        loader.close()
    begin = np.cumsum([0, *(len(d) for d in mixture.sources)])
    view = Dataset.concat(mixture.sources).select(begin[sources] + examples)
    return DrawnPass(
        mixture, int(seed), view, sources.astype(np.int32), examples, tokens, list(weights)
    )


def refuse_seed(source: Any, seed: Any, who: str) -> None:
    """Refuses ``seed=`` for a source that is not a mixture (jb.run and
    jb.map read a dataset in order; the seed drives a mixture's draws)."""
    if seed is not None and not isinstance(source, Mixture):
        raise ValueError(
            f"{who}: seed= drives a mixture's draws (jb.Dataset.mix); a {type(source).__name__} "
            f"is processed in order, once"
        )

"""Masked ops for padded and packed batches: reductions that ignore padding,
block-diagonal attention masks and per-segment sums. Every function is jit-
and vmap-safe and never gives NaN (nor a NaN gradient) for a fully masked row.

Example::

    import jaxbatch as jb
    pooled = jb.masked.mean(hidden, batch["tokens_mask"][..., None], axis=-2)
    allowed = jb.masked.attention_mask(batch["tokens_segment_ids"], causal=True)
"""

from jaxbatch._src.ops.masked import *  # noqa: F403 - the names _masked.__all__ lists
from jaxbatch._src.ops.masked import __all__  # noqa: F401

"""Masked ops for padded and packed batches: reductions that ignore padding,
block-diagonal attention masks, per-segment sums, and attention over packed
rows (``packed_attention``: jaxbatch's C++ kernel on CPU, cuDNN's fused kernel
on GPU) with the layouts
fused kernels take (``cu_seqlens``, ``cudnn_packed_layout``). Every function is jit-
and vmap-safe and never gives NaN (nor a NaN gradient) for a fully masked row.

Example::

    import jaxbatch as jb
    pooled = jb.masked.mean(hidden, batch["tokens_mask"][..., None], axis=-2)
    allowed = jb.masked.attention_mask(batch["tokens_segment_ids"], causal=True)
"""

from jaxbatch._src.ops.attention import *  # noqa: F403 - the names attention.__all__ lists
from jaxbatch._src.ops.attention import __all__ as _attention_all
from jaxbatch._src.ops.masked import *  # noqa: F403 - the names _masked.__all__ lists
from jaxbatch._src.ops.masked import __all__ as _masked_all

__all__ = [*_masked_all, *_attention_all]

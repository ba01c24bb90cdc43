"""Masked attention as an expert writes it in plain JAX for padded batches,
with no jaxbatch: the baselines' attention in bench_e2e (expert_minilm.py),
bench_train and bench_images.

Two ways, the faster chosen per benchmark by measurement (HOW, and
expert_minilm.ATTENTION):

* ``"bias"``: BERT's extended attention mask, an additive bias of ``0``
  where a query may attend to a key and float32's minimum where not, added to
  the scores before the softmax (the scores and softmax in float32);
* ``"dot_product_attention"``: ``jax.nn.dot_product_attention`` with the
  boolean mask (XLA's implementation, the only one on CPU).

A query that may attend to no key (a padding row) gets some finite average
of the values either way; the baselines never read it (their losses and
pooling count real tokens only).

Example::

    allowed = key_mask(valid, causal=True)        # [rows, 1, L, L]
    out = attend(q, k, v, allowed)                # q, k, v [rows, heads, L, size]
"""

from __future__ import annotations

import numpy as np

WAYS = ("bias", "dot_product_attention")
#: bench_train's and bench_images' choice. Measured (the process's CPU time
#: of a jitted baseline step, 7 alternating repetitions, 2-core AMD EPYC under
#: load 13): the two ways tie to within 2-3%, bias first or second by case:
#: bench_train at 16 x 512 675 ms against 662, at 40 x 64 106 against 107;
#: bench_images' pad batch of 16 x 256 x 256 169 against 164.
HOW = "bias"


def key_mask(valid, causal: bool = False):
    """[rows, 1, L, L]: query q may attend to key k when k is real
    (``valid`` [rows, L]) and, if ``causal``, k <= q."""
    import jax.numpy as jnp

    allowed = valid[:, None, None, :]
    if causal:
        length = valid.shape[-1]
        allowed = allowed & jnp.tril(jnp.ones((length, length), bool))
    return allowed


def attend(q, k, v, allowed, how: str = HOW):
    """q, k, v [rows, heads, L, size] (any float dtype; products accumulate
    in float32), ``allowed`` broadcastable to [rows, heads, L, L] to the
    attended values [rows, heads, L, size] in float32."""
    import jax
    import jax.numpy as jnp

    if how == "dot_product_attention":
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))  # its [rows, L, heads, size]
        out = jax.nn.dot_product_attention(q, k, v, mask=allowed, implementation="xla")
        return out.transpose(0, 2, 1, 3).astype(jnp.float32)
    if how != "bias":
        raise ValueError(f"attend: how must be one of {WAYS}, found {how!r}")
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32)
    bias = jnp.where(allowed, 0.0, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(scores / np.sqrt(q.shape[-1]) + bias, axis=-1)
    return jnp.einsum(
        "bhqk,bhkd->bhqd", weights.astype(v.dtype), v, preferred_element_type=jnp.float32
    )


def masked_mean(x, valid):
    """The mean of x [rows, L, width] over each row's real positions (``valid``
    [rows, L]): [rows, width]; zeros for a row with none."""
    import jax.numpy as jnp

    weights = valid.astype(x.dtype)[..., None]
    return (x * weights).sum(1) / jnp.maximum(weights.sum(1), 1.0)

"""The transformer the training benchmarks share (bench_train's byte model,
bench_images' ViT): pre-norm blocks with masked softmax attention and a ReLU
MLP, and the ahead-of-time compile cache that counts compilations; so every
benchmark's model is the same code and its figures compare. Only attention
differs between the two sides: the jaxbatch ways pass jaxbatch's
(:func:`masked_attention`, or jb.masked.packed_attention), the baselines
their own (expert_attention.py, no jaxbatch).

Example::

    keys = iter(jax.random.split(jax.random.PRNGKey(0), 8))
    layers = transformer.init_layers(keys, count=2, width=64, mlp=256)
    x = transformer.encode(layers, x, masked_attention(allowed), heads=2)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any


def init_layers(keys: Iterator[Any], count: int, width: int, mlp: int) -> list[dict]:
    """``count`` blocks' parameters, dense weights scaled by 1 / sqrt(fan in),
    drawn with the next 4 x ``count`` of ``keys`` (the caller's iterator, so
    its other parameters draw from the same split)."""
    import jax
    import jax.numpy as jnp

    def dense(fan_in, fan_out):
        return jax.random.normal(next(keys), (fan_in, fan_out), jnp.float32) / math.sqrt(fan_in)

    return [
        {
            "norm1": jnp.ones(width),
            "qkv": dense(width, 3 * width),
            "out": dense(width, width),
            "norm2": jnp.ones(width),
            "up": dense(width, mlp),
            "down": dense(mlp, width),
        }
        for _ in range(count)
    ]


def norm(x, scale):
    """RMS norm over the last axis."""
    import jax.numpy as jnp

    return x * scale / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)


def masked_attention(allowed) -> Callable:
    """Attention over [rows, heads, L, d] where a query attends to the keys
    ``allowed`` [rows, 1, L, L] marks (jb.masked.softmax: a row with none
    gets zeros, not NaN). Returns ``attend(q, k, v)``."""
    import jaxbatch as jb

    def attend(q, k, v):
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
        return jb.masked.softmax(scores, allowed) @ v

    return attend


def encode(layers: list[dict], x, attend, heads: int):
    """``x`` [rows, L, width] through the blocks; ``attend(q, k, v)`` is the
    attention over heads-first [rows, heads, L, d] (:func:`masked_attention`,
    or jb.masked.packed_attention with layout="BNTH")."""
    import jax.numpy as jnp

    rows, length, width = x.shape
    for p in layers:
        q, k, v = jnp.split(norm(x, p["norm1"]) @ p["qkv"], 3, axis=-1)
        q, k, v = (t.reshape(rows, length, heads, -1).transpose(0, 2, 1, 3) for t in (q, k, v))
        attended = attend(q, k, v).transpose(0, 2, 1, 3).reshape(rows, length, width)
        x = x + attended @ p["out"]
        h = norm(x, p["norm2"]) @ p["up"]
        x = x + (h * (h > 0)) @ p["down"]
    return x


class ShapeCache:
    """One ahead-of-time compiled ``fn(params, opt, *inputs)`` per distinct
    shape of the first input: the number of entries is the number of
    compilations, exactly, and ``seconds`` the time they took."""

    def __init__(self, fn: Callable, compiler_options: dict | None = None):
        import jax

        self._jitted = jax.jit(fn)
        self._options = compiler_options
        self.compiled: dict[tuple, Any] = {}
        self.seconds = 0.0

    def __call__(self, params, opt, *inputs):
        key = tuple(inputs[0].shape)
        if key not in self.compiled:
            import jax

            # Let the previous step finish first: dispatch is asynchronous,
            # and a step running beside the compiler would be counted here.
            jax.block_until_ready(params)
            t0 = time.perf_counter()
            lowered = self._jitted.lower(params, opt, *inputs)
            self.compiled[key] = lowered.compile(self._options)
            self.seconds += time.perf_counter() - t0
        return self.compiled[key](params, opt, *inputs)

"""Adam written in JAX, shared by the training benchmarks (bench_train,
bench_graphs), so every contender takes the same optimiser step without an
optax dependency.

Example::

    opt = adam.init(params)
    params, opt = adam.update(params, opt, grads, learning_rate)
"""

from __future__ import annotations

from typing import Any

B1, B2, EPS = 0.9, 0.999, 1e-8


def init(params: Any) -> dict:
    import jax
    import jax.numpy as jnp

    def zeros():
        return jax.tree.map(jnp.zeros_like, params)

    return {"m": zeros(), "v": zeros(), "step": jnp.zeros((), jnp.int32)}


def update(params: Any, opt: dict, grads: Any, learning_rate: Any) -> tuple[Any, dict]:
    """One bias-corrected Adam step: the new parameters and optimiser state."""
    import jax
    import jax.numpy as jnp

    step = opt["step"] + 1
    m = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, opt["m"], grads)
    v = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, opt["v"], grads)
    scale = learning_rate * jnp.sqrt(1 - B2**step) / (1 - B1**step)
    params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + EPS), params, m, v)
    return params, {"m": m, "v": v, "step": step}

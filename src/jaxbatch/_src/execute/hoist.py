"""Closed-over arrays as arguments, not constants, of a compiled function.

A per-example function usually closes over its model's weights. Under
``jax.jit`` those arrays become constants of the program: XLA folds and
copies them on every compilation (all-MiniLM-L6-v2's 90 MB of weights took
each new batch shape ~3x longer to compile than the same program taking the
weights as an argument). jb.map compiles once per planned shape, so it traces
the function, lifts the constants out and passes them as arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def hoisted(fun: Callable, *args: Any) -> tuple[Callable, list[Any]]:
    """``(run, consts)`` with ``run(consts, *args) == fun(*args)`` and the
    arrays ``fun`` closes over in ``consts``. Traces ``fun`` once at
    ``args``' shapes (arrays or ShapeDtypeStructs)."""
    import jax

    closed, out_shape = jax.make_jaxpr(fun, return_shape=True)(*args)
    jaxpr, out_tree = closed.jaxpr, jax.tree_util.tree_structure(out_shape)

    def run(consts, *call_args):
        leaves = jax.tree_util.tree_leaves(call_args)
        return jax.tree_util.tree_unflatten(out_tree, jax.core.eval_jaxpr(jaxpr, consts, *leaves))

    return run, list(closed.consts)

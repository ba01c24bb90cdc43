"""A Batch as a JAX pytree: its arrays are the leaves and what the batch is
(shape, columns, graph layout) rides along as static data, so ``jax.jit``,
``jax.device_put`` and ``tree_map`` give back a Batch that still has
``.graphs``, its masks and what :func:`jaxbatch.unbatch` reads.

Why a batch's attributes are split in two:

* static (the pytree's aux data): ``shape``, ``packed``, the column names and
  the graph layout. They are the same for every batch of one shape and
  hashable, and jit keys its cache on them, so under jit ``batch.shape.rows``
  and ``batch.segments`` are plain ints (a ``num_segments`` that must be
  static).
* per step: ``index`` and ``epoch``. They change every step. As aux data
  they would make jit compile every step (or, left out of its equality,
  bake the first step's values into the compiled step); as leaves they
  would be traced scalars that ``tree_map`` and ``vmap`` trip over. A Batch
  that JAX rebuilds therefore has them None; :func:`jaxbatch.device_prefetch`,
  which knows the host batch it put, keeps them (:func:`batch_like`).

Leaves come in sorted key order, as a dict's do, whatever order the keys
were inserted in; a rebuilt Batch holds its keys in that order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

#: Attributes that change from step to step: never part of the pytree.
PER_STEP = ("index", "epoch")


# --- pure logic ---------------------------------------------------------------


def _static(batch: Any) -> tuple[tuple[str, Any], ...]:
    """The attributes that describe the batch's layout, by name."""
    # jit flattens its arguments on every call, so this is a dict copy and
    # one sort by name (names are unique: values are never compared).
    attributes = vars(batch).copy()
    for name in PER_STEP:
        attributes.pop(name, None)
    return tuple(sorted(attributes.items()))


def _flatten_with_keys(batch: Any) -> tuple[list[tuple[Any, Any]], Any]:
    names = tuple(sorted(batch))
    children = [(jax.tree_util.DictKey(k), batch[k]) for k in names]
    return children, (names, _static(batch))


def _flatten(batch: Any) -> tuple[list[Any], Any]:
    names = sorted(batch)
    return list(map(batch.__getitem__, names)), (tuple(names), _static(batch))


def _unflattener(cls: type) -> Any:
    def unflatten(aux: Any, children: Any) -> Any:
        names, static = aux
        out = cls(zip(names, children, strict=True))
        for name, value in static:
            setattr(out, name, value)
        return out

    return unflatten


# --- the registration and a copy that keeps the step ---------------------------


def register(cls: type) -> None:
    """Registers `cls` (Batch, a dict subclass) as a pytree of its own, so
    JAX does not take it for a leaf."""
    jax.tree_util.register_pytree_with_keys(
        cls, _flatten_with_keys, _unflattener(cls), flatten_func=_flatten
    )


def batch_like(batch: Any, arrays: Mapping[str, Any]) -> Any:
    """A Batch of `arrays` (`batch`'s keys, in `batch`'s order) with every
    attribute of `batch`, per-step ones included: what a prefetcher that
    moved `batch`'s arrays yields."""
    out = type(batch)((k, arrays[k]) for k in batch)
    for name, value in vars(batch).items():
        setattr(out, name, value)
    return out

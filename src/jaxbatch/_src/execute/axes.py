"""check_axes: vmap's in_axes checked against the arguments before tracing.

jax.vmap reports shape problems from deep inside tracing, often naming the
wrong argument. This walks in_axes as a tree prefix of the arguments, and
names every mapped array by parameter name and pytree path, with its shape,
the axis asked and the sizes found.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


class AxisError(ValueError):
    """A vmap axis specification that does not fit the arguments."""


@dataclasses.dataclass(frozen=True)
class MappedLeaf:
    """One array vmap maps over: where it is and what it holds."""

    name: str  # e.g. "tokens['ids'] (arg 0)" or "mask (keyword)"
    shape: tuple[int, ...]
    axis: int  # normalised, >= 0
    keyword: bool

    @property
    def size(self) -> int:
        return self.shape[self.axis]


def _param_names(fun: Callable, count: int) -> list[str]:
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(count):
        if i < len(params) and params[i].kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            names.append(params[i].name)
        else:
            names.append(f"args[{i}]")
    return names


def _path_text(path: tuple) -> str:
    out = ""
    for key in path:
        out += f"[{key!r}]"
    return out


def _is_axis_leaf(axes: Any) -> bool:
    return axes is None or isinstance(axes, int | np.integer)


def _children(tree: Any) -> list[tuple[Any, Any]] | None:
    """(key, child) pairs of a pytree node, or None for a leaf."""
    import jax

    if isinstance(tree, Mapping):
        return [(k, tree[k]) for k in sorted(tree)]
    if isinstance(tree, tuple | list):
        return list(enumerate(tree))
    kids = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: x is not tree)[0]
    if len(kids) == 1 and kids[0][1] is tree:
        return None
    return [(jax.tree_util.keystr(path), child) for path, child in kids]


def _structure(tree: Any) -> str:
    import jax

    return str(jax.tree_util.tree_structure(tree))


def _walk(
    axes: Any, arg: Any, path: tuple, where: str, keyword: bool, out: list[MappedLeaf]
) -> None:
    if _is_axis_leaf(axes):
        import jax

        for leaf_path, leaf in jax.tree_util.tree_flatten_with_path(arg)[0]:
            full = path + tuple(_key_of(k) for k in leaf_path)
            if axes is None:
                continue
            shape = tuple(np.shape(leaf))
            name = f"{where.split(' (')[0]}{_path_text(full)} ({where.split(' (')[1]}"
            ndim = len(shape)
            axis = int(axes)
            if not -ndim <= axis < ndim:
                raise AxisError(
                    f"jb.vmap: in_axes asks for axis {axis} of {name}, which has shape {shape} "
                    f"(rank {ndim}); valid axes are {-ndim}..{ndim - 1}"
                    if ndim
                    else f"jb.vmap: in_axes asks for axis {axis} of {name}, a scalar (rank 0); "
                    f"map a scalar with in_axes=None, or give it a batch axis"
                )
            out.append(MappedLeaf(name, shape, axis % ndim, keyword))
        return
    children = _children(arg)
    axis_children = _children(axes)
    if (
        children is None
        or axis_children is None
        or type(axes) is not type(arg)
        and not (isinstance(axes, tuple | list) and isinstance(arg, tuple | list))
        or [k for k, _ in children] != [k for k, _ in axis_children]
    ):
        base, rest = where.split(" (")
        at = f"{base}{_path_text(path)} ({rest}"
        raise AxisError(
            f"jb.vmap: in_axes is not a tree prefix of the arguments at {at}: in_axes has "
            f"{_describe(axes)} but the argument is {_describe(arg)}\n"
            f"  in_axes:   {_structure(axes)}\n  argument:  {_structure(arg)}"
        )
    for (key, child), (_, child_axes) in zip(children, axis_children, strict=True):
        _walk(child_axes, child, path + (key,), where, keyword, out)


def _key_of(key: Any) -> Any:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return getattr(key, attr)
    return key


def _describe(tree: Any) -> str:
    if isinstance(tree, Mapping):
        return f"a dict with keys {sorted(tree)}"
    if isinstance(tree, tuple | list):
        return f"a {type(tree).__name__} of {len(tree)}"
    if _is_axis_leaf(tree):
        return f"the axis {tree!r}"
    return f"a {type(tree).__name__}"


def mapped_leaves(
    fun: Callable, in_axes: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> list[MappedLeaf]:
    """Every array vmap would map, with its name, shape and axis."""
    names = _param_names(fun, len(args))
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if isinstance(in_axes, tuple):
        if len(in_axes) != len(args):
            raise AxisError(
                f"jb.vmap: in_axes is a tuple of {len(in_axes)} but the function got "
                f"{len(args)} positional arguments ({', '.join(names) or 'none'}); give one "
                f"entry per positional argument (None for unmapped)"
            )
        per_arg = in_axes
    elif _is_axis_leaf(in_axes):
        per_arg = (in_axes,) * len(args)
    else:
        raise AxisError(
            f"jb.vmap: in_axes must be an int, None or a tuple with one entry per positional "
            f"argument, found {type(in_axes).__name__}"
        )
    out: list[MappedLeaf] = []
    for i, (arg, axes) in enumerate(zip(args, per_arg, strict=True)):
        _walk(axes, arg, (), f"{names[i]} (arg {i})", False, out)
    for key, value in kwargs.items():
        _walk(0, value, (), f"{key} (keyword)", True, out)
    return out


def check_axes(fun: Callable, in_axes: Any, *args: Any, **kwargs: Any) -> int:
    """Checks `in_axes` against the arguments as ``jax.vmap(fun, in_axes)``
    would see them, before any tracing, and returns the batch size.

    Raises :class:`AxisError` (a ValueError) naming the argument by parameter
    name, its pytree path, shape, the axis asked and the sizes found, e.g.::

        jb.vmap: inconsistent batch sizes: tokens['ids'] (arg 0) has 32 on
        axis 0 but mask (arg 1) has 31 on axis 0

    Keyword arguments are always mapped over axis 0 (as in jax.vmap); when one
    causes the mismatch the message says so.
    """
    leaves = mapped_leaves(fun, in_axes, args, kwargs)
    if not leaves:
        raise AxisError(
            "jb.vmap: nothing to map: every in_axes entry is None and there are no keyword "
            "arguments; give at least one argument a batch axis"
        )
    first = leaves[0]
    for leaf in leaves[1:]:
        if leaf.size != first.size:
            lines = [
                f"jb.vmap: inconsistent batch sizes: {first.name} has {first.size} on axis "
                f"{first.axis} but {leaf.name} has {leaf.size} on axis {leaf.axis}",
                "  mapped arguments:",
            ]
            width = max(len(x.name) for x in leaves)
            for x in leaves:
                lines.append(
                    f"    {x.name.ljust(width)}  shape {x.shape}  axis {x.axis}  size {x.size}"
                )
            if leaf.keyword or first.keyword:
                kw = leaf if leaf.keyword else first
                lines.append(
                    f"  note: keyword arguments are always mapped over axis 0 (in_axes covers "
                    f"positional arguments only), so {kw.name.split(' (')[0]} is mapped; pass it "
                    f"positionally with in_axes=None, or close over it, to leave it unmapped"
                )
            raise AxisError("\n".join(lines))
    return first.size


def broadcast_prefix(axes, tree):
    """Expands an in_axes prefix to one axis per leaf of `tree`."""
    import jax

    if axes is None or isinstance(axes, int):
        return jax.tree_util.tree_map(lambda _: axes, tree)
    return jax.tree_util.tree_map(
        lambda ax, sub: jax.tree_util.tree_map(lambda _: ax, sub),
        axes,
        tree,
        is_leaf=lambda x: x is None or isinstance(x, int),
    )

"""Broadcasting made explicit: explain a shape mismatch, and refuse silent rank promotion.

NumPy and JAX line shapes up from the right; at every axis the sizes must be equal or 1, and a
shorter shape is silently given leading size-1 axes ("rank promotion"). Both rules hide bugs:
a mismatch reports two shapes and leaves the reader to align them, and rank promotion turns a
per-example vector plus a batch into a batch without a word.

`explain_broadcast` checks shapes and, when they do not broadcast, raises a `BroadcastError`
whose message is a table with one row per argument and one column per result axis, the
conflicting axes marked, and concrete fixes (`x[:, None]`, `x.T`, `jnp.broadcast_to`) that were
checked to work. `strict_broadcasting` turns on JAX's `jax_numpy_rank_promotion="raise"` and
re-raises JAX's terse error as the same table.

The checks are pure functions over shape tuples; only `strict_broadcasting` touches JAX.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import jax

Shape = tuple[int, ...]
_F = TypeVar("_F", bound=Callable[..., Any])

# Fixes found by search are capped: a few checked suggestions beat a list to read through.
_MAX_FIXES = 4
# Transposes are found by trying permutations; past this rank the search costs more than it helps.
_MAX_PERMUTE_RANK = 6


class BroadcastError(ValueError):
    """Shapes that do not broadcast, or that need rank promotion where it is disabled.

    ``shapes`` and ``names`` are the arguments as checked; the message lines them up axis by
    axis and suggests fixes.
    """

    def __init__(self, message: str, shapes: Sequence[Shape] = (), names: Sequence[str] = ()):
        super().__init__(message)
        self.shapes = tuple(shapes)
        self.names = tuple(names)


# ---------------------------------------------------------------------------------------------
# Pure shape logic.


def _as_shape(arg: Any, name: str) -> Shape:
    shape = getattr(arg, "shape", arg)
    if not isinstance(shape, (tuple, list)):
        raise TypeError(
            f"explain_broadcast: {name} must be an array (anything with .shape) or a shape "
            f"tuple such as (3, 4); found {type(arg).__name__} {arg!r}"
        )
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(
            f"explain_broadcast: {name} has shape {tuple(shape)!r}; expected integer sizes"
        ) from None
    if any(d < 0 for d in dims):
        raise ValueError(f"explain_broadcast: {name} has shape {dims}; sizes must be >= 0")
    return dims


def _axis_sizes(shapes: Sequence[Shape], axis: int) -> list[int | None]:
    """Each shape's size at negative ``axis``, None where the shape is too short."""
    return [s[axis] if len(s) >= -axis else None for s in shapes]


def _broadcast_axis(sizes: Sequence[int | None]) -> int | None:
    """The broadcast size of one axis, or None when two sizes other than 1 differ."""
    real = {s for s in sizes if s is not None and s != 1}
    if len(real) > 1:
        return None
    return real.pop() if real else 1


def _broadcast(shapes: Sequence[Shape]) -> Shape | None:
    """The broadcast shape, or None when the shapes do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-rank, 0):
        size = _broadcast_axis(_axis_sizes(shapes, axis))
        if size is None:
            return None
        out.append(size)
    return tuple(out)


def _promoted(shapes: Sequence[Shape], rank: int) -> list[int]:
    """Arguments that rank promotion would extend. Scalars are exempt, as in JAX: ``x * 2.0``."""
    return [i for i, s in enumerate(shapes) if 0 < len(s) < rank]


class _Fix(NamedTuple):
    arg: int  # which argument the fix rewrites
    expr: str  # a Python expression over the argument's name
    shape: Shape  # the argument's shape after the fix
    result: Shape  # the broadcast shape after the fix


def _insert_axis_expr(name: str, pos: int, rank: int) -> str:
    if pos == 0:
        return f"{name}[None]"
    if pos <= max(1, rank - pos):
        return f"{name}[{':, ' * pos}None]"
    return f"{name}[..., None{', :' * (rank - pos)}]"


def _permute_expr(name: str, perm: tuple[int, ...]) -> str:
    rank = len(perm)
    if rank == 2:
        return f"{name}.T"
    for src, dst in itertools.product(range(rank), repeat=2):
        if src != dst and _move(rank, src, dst) == perm:  # one move reads better
            return f"jnp.moveaxis({name}, {src}, {-1 if dst == rank - 1 else dst})"
    return f"jnp.transpose({name}, {perm})"


def _move(rank: int, src: int, dst: int) -> tuple[int, ...]:
    """The axis order ``jnp.moveaxis(x, src, dst)`` gives."""
    order = [a for a in range(rank) if a != src]
    order.insert(dst, src)
    return tuple(order)


def _with_shape(shapes: Sequence[Shape], i: int, shape: Shape) -> list[Shape]:
    return [shape if j == i else s for j, s in enumerate(shapes)]


def _best(candidates: Iterator[_Fix]) -> list[_Fix]:
    """The candidate with the smallest result, the first of those; [] if none."""
    best = min(candidates, key=lambda f: math.prod(f.result), default=None)
    return [] if best is None else [best]


def _insert_axis_fixes(shapes: Sequence[Shape], names: Sequence[str], i: int) -> list[_Fix]:
    """A size-1 axis whose insertion into argument ``i`` makes everything broadcast."""
    s = shapes[i]

    def candidates() -> Iterator[_Fix]:
        for pos in range(len(s) + 1):
            new = s[:pos] + (1,) + s[pos:]
            result = _broadcast(_with_shape(shapes, i, new))
            if result is not None:
                yield _Fix(i, _insert_axis_expr(names[i], pos, len(s)), new, result)

    return _best(candidates())


def _permutations(rank: int) -> Iterator[tuple[int, ...]]:
    """Non-identity axis orders, simplest first: single moves, then everything else."""
    seen = {tuple(range(rank))}
    for src, dst in itertools.product(range(rank), repeat=2):
        order = _move(rank, src, dst)
        if order not in seen:
            seen.add(order)
            yield order
    for perm in itertools.permutations(range(rank)):
        if perm not in seen:
            yield perm


def _transpose_fixes(shapes: Sequence[Shape], names: Sequence[str], i: int) -> list[_Fix]:
    """An order of argument ``i``'s axes (those of size other than 1) that makes everything
    broadcast."""
    s = shapes[i]
    if not 2 <= len(s) <= _MAX_PERMUTE_RANK:
        return []

    ones = [a for a, d in enumerate(s) if d == 1]

    def candidates() -> Iterator[_Fix]:
        tried = {s}
        for perm in _permutations(len(s)):
            new = tuple(s[a] for a in perm)
            # Moving a size-1 axis is an axis insertion in disguise; those are found above.
            if new not in tried and all(new[a] == 1 for a in ones):
                tried.add(new)
                result = _broadcast(_with_shape(shapes, i, new))
                if result is not None:
                    yield _Fix(i, _permute_expr(names[i], perm), new, result)

    return _best(candidates())


def _mismatch_fixes(
    shapes: Sequence[Shape], names: Sequence[str], conflicts: Sequence[int]
) -> tuple[list[_Fix], bool]:
    """Fixes for shapes that do not broadcast, and whether they are outer products.

    Only an argument with a size other than 1 at a conflicting axis can remove the conflict, so
    only those are rewritten: one inserted axis, or one reordering of its axes. Fixes that keep
    the result's rank (an axis was misplaced) are offered first; only when there is none are
    insertions that give the result a new axis (an outer product) offered, since that is
    rarely what was meant.
    """
    involved = [
        i for i, s in enumerate(shapes) if any(len(s) >= -a and s[a] != 1 for a in conflicts)
    ]
    inserts = [f for i in involved for f in _insert_axis_fixes(shapes, names, i)]
    transposes = [f for i in involved for f in _transpose_fixes(shapes, names, i)]
    rank = max(len(s) for s in shapes)
    aligned = [f for f in inserts + transposes if len(f.result) <= rank]
    if aligned:
        return aligned[:_MAX_FIXES], False
    return inserts[:_MAX_FIXES], True


def _promotion_fixes(shapes: Sequence[Shape], names: Sequence[str], result: Shape) -> list[_Fix]:
    """Explicit forms of the rank promotion the shapes would need."""
    fixes = []
    for i in _promoted(shapes, len(result)):
        s = shapes[i]
        missing = len(result) - len(s)
        if missing <= 2:
            expr = f"{names[i]}[{', '.join(['None'] * missing)}]"
        else:
            expr = f"jnp.expand_dims({names[i]}, {tuple(range(missing))})"
        fixes.append(_Fix(i, expr, (1,) * missing + s, result))
        fixes.append(_Fix(i, f"jnp.broadcast_to({names[i]}, {result})", result, result))
    return fixes[:_MAX_FIXES]


# ---------------------------------------------------------------------------------------------
# The message.


def _table(
    shapes: Sequence[Shape],
    names: Sequence[str],
    result: Sequence[int | None],
    marked: Sequence[int],
) -> list[str]:
    """Rows: one per argument, then the result, then a caret under each marked axis.
    Columns: name, shape, then one per result axis, right-aligned, counted from the right."""
    rank = len(result)
    header = ["arg", "shape"] + [str(a) for a in range(-rank, 0)]
    rows = [header]
    for name, s in zip(names, shapes, strict=True):
        sizes = [str(s[a]) if len(s) >= -a else "-" for a in range(-rank, 0)]
        rows.append([name, str(s)] + sizes)
    result_shape = str(tuple(result)) if None not in result else ""
    rows.append(["result", result_shape] + ["?" if r is None else str(r) for r in result])
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    lines = []
    for row in rows:
        left = f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}} |"
        right = "".join(f"  {cell:>{widths[2 + k]}}" for k, cell in enumerate(row[2:]))
        lines.append("  " + left + right)
    carets = "".join(
        f"  {('^' if a - rank in marked else ''):>{widths[2 + a]}}" for a in range(rank)
    )
    lines.append("  " + " " * (widths[0] + 2 + widths[1]) + " |" + carets.rstrip())
    return lines


def _sizes_text(shapes: Sequence[Shape], names: Sequence[str], axis: int) -> str:
    """'3 in x (its axis 0), 4 in y (its axis 1)' for the arguments that disagree at ``axis``."""
    parts = []
    for name, s in zip(names, shapes, strict=True):
        if len(s) >= -axis and s[axis] != 1:
            parts.append(f"{s[axis]} in {name} (its axis {len(s) + axis})")
    return ", ".join(parts)


def _fix_lines(fixes: Sequence[_Fix], names: Sequence[str], outer: bool = False) -> list[str]:
    if not fixes:
        return []
    note = "; each adds an axis to the result: an outer product" if outer else ""
    lines = [f"possible fixes (each checked to broadcast{note}):"]
    width = max(len(f.expr) for f in fixes)
    for f in fixes:
        lines.append(f"  {f.expr:<{width}}  # {names[f.arg]} becomes {f.shape}; result {f.result}")
    return lines


def _failure_message(
    shapes: Sequence[Shape],
    names: Sequence[str],
    allow_rank_promotion: bool,
    where: str = "",
    disabled_by: str = "allow_rank_promotion=False",
) -> str | None:
    """Why ``shapes`` cannot be broadcast, or None when they can."""
    listed = ", ".join(f"{n} {s}" for n, s in zip(names, shapes, strict=True))
    rank = max((len(s) for s in shapes), default=0)
    columns = [_broadcast_axis(_axis_sizes(shapes, a)) for a in range(-rank, 0)]
    conflicts = [a - rank for a, c in enumerate(columns) if c is None]
    rule = (
        "shapes line up from the right; at each axis the sizes must be equal or 1\n"
        '("-": the argument lacks the axis, which counts as size 1)'
    )
    if conflicts:
        details = "; ".join(f"axis {a}: {_sizes_text(shapes, names, a)}" for a in conflicts)
        lines = [f"{where}cannot broadcast {listed}: sizes differ at {details}"]
        lines += _table(shapes, names, columns, conflicts)
        lines.append(rule)
        fixes, outer = _mismatch_fixes(shapes, names, conflicts)
        lines += _fix_lines(fixes, names, outer)
        return "\n".join(lines)
    result = tuple(c for c in columns if c is not None)
    promoted = _promoted(shapes, rank)
    if allow_rank_promotion or not promoted:
        return None
    who = ", ".join(f"{names[i]} {shapes[i]} (rank {len(shapes[i])})" for i in promoted)
    missing = sorted({a for i in promoted for a in range(-rank, -len(shapes[i]))})
    lines = [
        f"{where}implicit rank promotion: {who} would get leading axes to match the result "
        f"{result} (rank {rank})",
        f"rank promotion is disabled ({disabled_by})",
    ]
    lines += _table(shapes, names, columns, missing)
    lines.append(rule)
    lines.append("add the axes explicitly if the promotion is intended; otherwise it is a bug")
    lines += _fix_lines(_promotion_fixes(shapes, names, result), names)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Public API.


def explain_broadcast(
    *arrays_or_shapes: Any,
    names: Sequence[str] | None = None,
    allow_rank_promotion: bool = True,
) -> Shape:
    """The broadcast shape of the arguments, or a `BroadcastError` that explains why not.

    Each argument is an array (anything with ``.shape``) or a shape tuple. The rules are
    NumPy's and JAX's (the result equals ``np.broadcast_shapes``). With
    ``allow_rank_promotion=False`` it also raises when a non-scalar argument has lower rank
    than the result, the check ``jax_numpy_rank_promotion="raise"`` makes; scalars are exempt,
    as they are in JAX.

    Example::

        explain_broadcast((3,), (3, 4), names=["x", "y"])
        # BroadcastError: cannot broadcast x (3,), y (3, 4): sizes differ at axis -1: 3 in x
        # (its axis 0), 4 in y (its axis 1)
        #   arg     shape  |  -2  -1
        #   x       (3,)   |   -   3
        #   y       (3, 4) |   3   4
        #   result         |   3   ?
        #                  |       ^
        # shapes line up from the right; at each axis the sizes must be equal or 1
        # ("-": the argument lacks the axis, which counts as size 1)
        # possible fixes (each checked to broadcast):
        #   x[:, None]  # x becomes (3, 1); result (3, 4)
        #   y.T         # y becomes (4, 3); result (4, 3)
    """
    if names is None:
        names = [f"arg{i}" for i in range(len(arrays_or_shapes))]
    else:
        names = [str(n) for n in names]
        if len(names) != len(arrays_or_shapes):
            raise ValueError(
                f"explain_broadcast: got {len(arrays_or_shapes)} arguments but {len(names)} names"
            )
    shapes = [_as_shape(a, n) for a, n in zip(arrays_or_shapes, names, strict=True)]
    message = _failure_message(shapes, names, allow_rank_promotion)
    if message is not None:
        raise BroadcastError(message, shapes, names)
    result = _broadcast(shapes)
    assert result is not None
    return result


# JAX's messages, from jax/_src/numpy/util.py::_rank_promotion_warning_or_error ("Operands could
# not be broadcast together for add on shapes (3,) (2, 3) and with the config option
# jax_numpy_rank_promotion='raise'. ...") and jnp.vectorize ("operands with shapes [(3,), (2, 3)]
# require rank promotion for jnp.vectorize function with signature None. ..."). The shapes exist
# only in this text. With a signature, vectorize compares ranks without the core dimensions, so
# a table of whole shapes would mislead; that message is kept as it is.
_JAX_MESSAGES = (
    re.compile(r"for (?P<fun>\S+) on shapes (?P<shapes>.*?) and with the config option"),
    re.compile(
        r"shapes \[(?P<shapes>.*?)\] require rank promotion for jnp\.(?P<fun>vectorize) "
        r"function with signature None\."
    ),
)
_JAX_SHAPE = re.compile(r"\(([^()]*)\)")


def _parse_jax_shapes(text: str) -> list[Shape] | None:
    shapes = []
    for inner in _JAX_SHAPE.findall(text):
        parts = [p.strip() for p in inner.split(",") if p.strip()]
        if not all(p.isdigit() for p in parts):
            return None  # symbolic dimensions: leave JAX's message as it is
        shapes.append(tuple(int(p) for p in parts))
    return shapes or None


def _from_jax_error(error: ValueError) -> BroadcastError:
    """JAX's rank-promotion error as a `BroadcastError` with the table."""
    message = str(error)
    for pattern in _JAX_MESSAGES:
        match = pattern.search(message)
        if match:
            break
    shapes = _parse_jax_shapes(match["shapes"]) if match else None
    if match and shapes is not None:
        names = [f"arg{i}" for i in range(len(shapes))]
        explained = _failure_message(
            shapes,
            names,
            False,
            where=f"in jnp.{match['fun']}: ",
            disabled_by="strict_broadcasting: jax_numpy_rank_promotion='raise'",
        )
        if explained is not None:
            return BroadcastError(explained, shapes, names)
    # A message we cannot read (another wording, symbolic shapes): keep JAX's words.
    return BroadcastError(f"implicit rank promotion under strict_broadcasting: {message}")


def _is_rank_promotion_error(error: BaseException | None) -> bool:
    return (
        isinstance(error, ValueError)
        and not isinstance(error, BroadcastError)
        and "jax_numpy_rank_promotion" in str(error)
    )


class _StrictBroadcasting:
    """The context manager `strict_broadcasting()` returns; also a decorator."""

    def __init__(self) -> None:
        self._entered: list[Any] = []  # a stack, so one instance may be re-entered

    def __enter__(self) -> _StrictBroadcasting:
        inner = jax.numpy_rank_promotion("raise")
        inner.__enter__()
        self._entered.append(inner)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._entered.pop().__exit__(exc_type, exc, tb)  # restore the setting first
        if _is_rank_promotion_error(exc):
            raise _from_jax_error(exc) from exc

    def __call__(self, fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _StrictBroadcasting():
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def strict_broadcasting(fn: _F | None = None) -> Any:
    """Make implicit rank promotion an error, explained as a `BroadcastError`.

    Sets ``jax_numpy_rank_promotion="raise"`` (JAX's own check) for the current thread and
    restores the previous value on exit, also after an exception. JAX's ``ValueError`` is
    re-raised as a `BroadcastError` with the axis-by-axis table, the original chained. Equal
    ranks still broadcast size-1 axes, and scalars still combine with anything.

    Use as a context manager or a decorator, with or without parentheses::

        with strict_broadcasting():
            y = f(x)

        @strict_broadcasting        # or @strict_broadcasting()
        def loss(params, batch): ...

    Under ``jax.jit`` the check runs when tracing. The setting is part of jit's cache key, so a
    function already compiled outside the context is traced again inside it and the check is
    not skipped; a jitted function wrapped by the decorator (either order) is checked too.
    """
    if fn is None:
        return _StrictBroadcasting()
    if not callable(fn):
        raise TypeError(
            f"strict_broadcasting takes a function to decorate or nothing; found {fn!r}"
        )
    return _StrictBroadcasting()(fn)

"""What keys a job on its function: a name for messages and a fingerprint
that is the same in every run and every process for the same code and
arguments, so a resumed job can tell it runs the same function.

A function is keyed on its source (its bytecode when there is none); a
``functools.partial`` on its function and arguments; a callable object (the
model a factory returns) on its class's source. Values a function closes
over and an object's attributes (weights) are not read: ``tag=`` keys those.
Anything whose text would hold a memory address (``repr`` of an arbitrary
object) is not fingerprinted at all: the job then asks for ``tag=``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.collate.collate import pad_values
from jaxbatch._src.data.opening import schema_rules
from jaxbatch._src.job.folder import JobError

# How deep partial arguments and containers are followed.
_MAX_DEPTH = 8
# What a fingerprint is when only the tag keys the function.
TAG_ONLY = "tag"


def function_key(fun: Callable) -> str:
    """``module:qualname`` of a function, its class's for a callable object."""
    if isinstance(fun, functools.partial):
        return f"functools.partial({function_key(fun.func)})"
    if not (inspect.isfunction(fun) or inspect.ismethod(fun) or inspect.isbuiltin(fun)):
        target = inspect.unwrap(fun) if hasattr(fun, "__wrapped__") else type(fun)
    else:
        target = fun
    module = getattr(target, "__module__", None) or "?"
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}:{qualname}"


def function_fingerprint(fun: Callable, tag: str | None, what: str) -> str:
    """A stable fingerprint of `fun`, or :data:`TAG_ONLY` when only ``tag``
    can key it. JobError, saying what to pass, when it has neither."""
    plain = inspect.unwrap(fun)
    if inspect.isfunction(plain):  # As jobs of format 1 keyed it, so they resume.
        try:
            text = inspect.getsource(plain).encode()
        except (OSError, TypeError):
            text = plain.__code__.co_code
        return hashlib.sha256(text).hexdigest()[:16]
    text = _stable_text(fun, 0)
    if text is not None:
        return hashlib.sha256(text.encode()).hexdigest()[:16]
    if tag is not None:
        return TAG_ONLY
    raise JobError(
        f"jb.run: {what} ({function_key(fun)}, a {type(fun).__name__}) has no fingerprint that "
        f"stays the same from run to run (neither its source nor its arguments can be read "
        f"without a memory address), so a resumed job could not check it runs the same "
        f"function: pass tag='...' naming its version (e.g. the model's and its weights'), "
        f"which the job is then keyed on"
    )


def _stable_text(obj: Any, depth: int) -> str | None:
    """Text equal for equal code and values in every process, or None."""
    if depth > _MAX_DEPTH:
        return None
    if obj is None or isinstance(obj, bool | int | float | complex | str | bytes):
        return repr(obj)
    if isinstance(obj, tuple | list):
        parts = [_stable_text(x, depth + 1) for x in obj]
        return None if None in parts else f"{type(obj).__name__}({','.join(parts)})"
    if isinstance(obj, set | frozenset):
        parts = [_stable_text(x, depth + 1) for x in obj]
        return None if None in parts else f"set({','.join(sorted(parts))})"
    if isinstance(obj, dict):
        items = [(_stable_text(k, depth + 1), _stable_text(v, depth + 1)) for k, v in obj.items()]
        if any(k is None or v is None for k, v in items):
            return None
        return "dict(" + ",".join(f"{k}:{v}" for k, v in sorted(items)) + ")"
    if isinstance(obj, np.ndarray | np.generic) or _is_jax_array(obj):
        array = np.ascontiguousarray(np.asarray(obj))
        if array.dtype == object:
            return None
        digest = _core.hash64(array.view(np.uint8).reshape(-1).tobytes())
        return f"array({array.dtype.str},{array.shape},{digest:016x})"
    if isinstance(obj, functools.partial):
        parts = [_stable_text(x, depth + 1) for x in (obj.func, obj.args, obj.keywords)]
        return None if None in parts else f"partial({','.join(parts)})"
    if inspect.ismethod(obj):  # Keyed on its code and class, like a callable object.
        parts = [_stable_text(obj.__func__, depth + 1), _source_text(type(obj.__self__))]
        return None if None in parts else f"method({','.join(parts)})"
    if hasattr(obj, "__wrapped__"):  # functools.wraps, jax.jit: the function inside.
        return _stable_text(inspect.unwrap(obj), depth + 1)
    if inspect.isfunction(obj):
        return _source_text(obj) or _code_text(obj.__code__)
    if inspect.isclass(obj):
        return _source_text(obj)
    if callable(obj):
        return _source_text(type(obj))
    return None


def _source_text(target: Any) -> str | None:
    try:
        source = inspect.getsource(target)
    except (OSError, TypeError):
        return None
    return f"{getattr(target, '__qualname__', '?')}:{source}"


def _code_text(code: types.CodeType) -> str | None:
    """A function without source (made by exec): its bytecode and constants."""
    consts = [
        _code_text(c) if isinstance(c, types.CodeType) else _stable_text(c, 1)
        for c in code.co_consts
    ]
    return None if None in consts else f"code({code.co_code.hex()},{','.join(consts)})"


# --- the loader's options, as the engine takes them -------------------------


def schema_key(schema: Any) -> list[list[Any]]:
    """The column rules the engine enforces for `schema`, by column, as
    JSON values: equal for equal rules however they were spelled
    (``np.int32`` or ``"int32"``)."""
    rules = schema_rules(schema or {}, list(schema or {}), "jb.run")
    return [
        [r.name, r.dtype, r.inner_shape, r.min_length, r.max_length, r.finite]
        for r in sorted(rules, key=lambda r: r.name)
    ]


def pad_key(pad_value: Any) -> dict[str, Any]:
    """The pad values the engine collates with: the default and each named
    column's, as JSON values (``0`` and ``0.0`` pad alike)."""
    pads, default = pad_values(pad_value, "jb.run")
    return {"default": default, "columns": sorted([name, value] for name, value in pads)}


def same_as_recorded_text(option: str, recorded: str, schema: Any, pad_value: Any) -> bool:
    """Whether a job of format 1 or 2, which recorded ``schema`` and
    ``pad_value`` as Python text, was run with the same ones: the pad
    values are read back and compared as the engine takes them; a schema's
    text (its dataclasses' repr) can only be compared as text."""
    if option == "pad_value":
        try:
            return pad_key(ast.literal_eval(recorded)) == pad_key(pad_value)
        except (ValueError, SyntaxError, TypeError):
            return False
    return recorded == repr(dict(schema or {}))


def _is_jax_array(obj: Any) -> bool:
    return type(obj).__module__.startswith(("jax", "jaxlib")) and hasattr(obj, "__array__")

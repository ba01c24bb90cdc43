"""The executor jb.map and jb.run run batches through: the per-example
function, checked and vmapped, compiled once per input signature (the
plan's other shapes compiled ahead, in the background), with its compile
and run time counted in :class:`MapStats`."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from jaxbatch._src.base.words import counted
from jaxbatch._src.collate import keys
from jaxbatch._src.data.mixture import SourceShare
from jaxbatch._src.execute.failures import CHECK, FINITE
from jaxbatch._src.execute.hoist import hoisted


@dataclasses.dataclass
class MapStats:
    """What a jb.map run did: batches and examples processed, distinct
    compiled shapes, seconds compiling, running and waiting for batches, and
    every OOM back-off."""

    batches: int = 0
    examples: int = 0
    compilations: int = 0
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    # (rows, new rows) per back-off; a graph batch's ((nodes, edges, graphs), halved).
    backoffs: list[tuple[Any, Any]] = dataclasses.field(default_factory=list)
    rows_limit: int | None = None  # rows per chunk after OOM back-offs (None: never backed off)
    expected_shapes: int | None = None
    #: Seconds waiting for the next batch (the loader's share of the run).
    load_seconds: float = 0.0
    #: Over a mixture: each source's part of the examples returned (examples
    #: and tokens, each also as a share, beside its weight), by name in the
    #: mixture's order; {} over one dataset.
    sources: dict[str, SourceShare] = dataclasses.field(default_factory=dict)

    @property
    def seconds_per_batch(self) -> float:
        return self.run_seconds / self.batches if self.batches else 0.0

    def __str__(self) -> str:
        return (
            f"{counted(self.examples, 'example')} in {counted(self.batches, 'batch', 'batches')}; "
            f"{counted(self.compilations, 'compilation')} ({self.compile_seconds:.2f} s), "
            f"{self.seconds_per_batch * 1e3:.2f} ms "
            f"per batch; OOM back-offs: {self.backoffs or 'none'}"
        )


class Executor:
    """Compiles the checked, vmapped function once per input signature."""

    def __init__(self, fun, check_finite, check, length_column):
        import jax

        self.compiled: dict[Any, Any] = {}
        self.stats = MapStats()
        self.fun = fun
        self.check_finite, self.check = check_finite, check

        def per_example(example):
            # Flags per row, or per segment of a packed row: a failed check
            # sets aside the examples it concerns, not their row-mates.
            out = fun(example)
            flags = jax.numpy.zeros(_flag_shape(example), jax.numpy.int32)
            if check_finite:
                finite = _finite(out, example, length_column)
                flags = flags | jax.numpy.where(finite, 0, FINITE)
            if check is not None:
                passed = jax.numpy.asarray(check(example, out), dtype=bool)
                flags = flags | jax.numpy.where(passed, 0, CHECK)
            return out, flags

        self.batched = jax.vmap(per_example)
        self.length_column = length_column
        self.pending: dict[Any, Any] = {}  # key -> Future of a compile_ahead compilation
        self._ahead: tuple[list, bool] | None = None

    def _compile(self, arrays) -> tuple[Any, list]:
        import jax

        # The arrays fun closes over (a model's weights) become arguments:
        # each new shape then compiles ~3x faster (see _hoist).
        run, consts = hoisted(self.batched, arrays)
        return jax.jit(run).lower(consts, arrays).compile(), consts

    def compile_ahead(self, shapes: list, packed: bool) -> None:
        """Compiles the plan's other batch shapes (``BatchShape``s, in the
        order the batches come) in a background thread, starting after the
        first batch shows the arrays' layout: XLA compiles the next shape
        while this one runs. A shape still compiling when its first batch
        comes is waited for; ``stats.compile_seconds`` is the time waited."""
        self._ahead = (list(shapes), packed)

    def _start_ahead(self, template: dict[str, np.ndarray]) -> None:
        import concurrent.futures

        import jax

        shapes, packed = self._ahead
        self._ahead = None
        specs = []
        for shape in shapes:
            spec = _spec_for(template, shape, packed, self.length_column)
            if spec is None:
                return  # A layout it cannot predict: compile each shape when it comes.
            key = _key(spec)
            if key not in self.compiled and key not in self.pending:
                specs.append((key, spec))
        if not specs:
            return
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxbatch-compile")
        for key, spec in specs:
            spec = {k: jax.ShapeDtypeStruct(*v) for k, v in spec.items()}
            self.pending[key] = pool.submit(self._compile, spec)
        pool.shutdown(wait=False)

    def close(self) -> None:
        """Cancels the compilations ahead that have not started (the run is
        over, or failed): the process does not wait for them at exit."""
        for future in self.pending.values():
            future.cancel()
        self.pending.clear()
        self._ahead = None

    def __call__(self, arrays: dict[str, np.ndarray]):
        import jax

        key = _key({k: (v.shape, v.dtype) for k, v in arrays.items()})
        entry = self.compiled.get(key)
        if entry is None:
            start = time.perf_counter()
            future = self.pending.pop(key, None)
            if future is not None and not future.cancel():  # Compiling or done: wait.
                entry = future.result()
            else:  # Not started (or not planned): compile it now, here.
                entry = self._compile(arrays)
            self.stats.compile_seconds += time.perf_counter() - start
            self.stats.compilations += 1
            self.compiled[key] = entry
            if self._ahead is not None:
                self._start_ahead(arrays)
        compiled, consts = entry
        start = time.perf_counter()
        out, flags = compiled(consts, arrays)
        out = jax.block_until_ready(out)
        self.stats.run_seconds += time.perf_counter() - start
        return jax.tree_util.tree_map(np.asarray, out), np.asarray(flags)


def _flag_shape(example: Any) -> tuple[int, ...]:
    """A row's flags: one, or one per segment slot of a packed row (whose
    example_index is [S])."""
    index = example.get(keys.EXAMPLE_INDEX) if isinstance(example, dict) else None
    return tuple(index.shape) if index is not None and index.ndim == 1 else ()


def _finite(out: Any, example: Any, column: str) -> Any:
    """Whether a row's outputs are finite over its real tokens: a bool, or
    for a packed row one per segment slot (a per-segment leaf [S, ...]
    by slot, a per-token leaf [L, ...] by its tokens' segments, anything
    else, or a leaf as long as both, for the whole row)."""
    import jax
    import jax.numpy as jnp

    shape = _flag_shape(example)
    mask = _real_tokens(example, column)
    ids = example.get(keys.segment_ids(column)) if shape and isinstance(example, dict) else None
    finite = jnp.ones(shape, bool)
    for leaf in jax.tree_util.tree_leaves(out):
        if not jnp.issubdtype(leaf.dtype, jnp.inexact):
            continue
        ok = jnp.isfinite(leaf)
        tokens = mask is not None and leaf.ndim >= 1 and leaf.shape[0] == mask.shape[0]
        if tokens:
            ok = ok | ~mask.reshape(mask.shape + (1,) * (leaf.ndim - 1))
        lead = leaf.shape[0] if leaf.ndim else None
        if shape and lead == shape[0] and not tokens:  # per segment
            finite = finite & ok.reshape(lead, -1).all(1)
        elif shape and tokens and ids is not None and lead != shape[0]:  # per token
            slot = jnp.where(ids > 0, ids - 1, shape[0])  # padding: out of range, dropped
            bad = ~ok.reshape(lead, -1).all(1)
            finite = finite & ~jnp.zeros(shape, bool).at[slot].max(bad, mode="drop")
        else:
            finite = finite & ok.all()
    return finite


def _real_tokens(example: Any, column: str) -> Any:
    """A row's real tokens (or patches) of `column`, for check_finite to
    pass over its padding: the mask of a padded row, else the segment ids
    of a packed one (Pack's and PatchPack's rows have no mask); None when
    the row has neither."""
    if not isinstance(example, dict):
        return None
    if keys.mask(column) in example:
        return example[keys.mask(column)]
    ids = example.get(keys.segment_ids(column))
    return None if ids is None else ids != 0


def _key(layout: dict[str, tuple]) -> tuple:
    """A compiled program's key: every array's name, shape and dtype."""
    return tuple(
        (k, tuple(shape), np.dtype(dtype).str) for k, (shape, dtype) in sorted(layout.items())
    )


def _spec_for(template: dict[str, np.ndarray], shape, packed: bool, length_column: str):
    """{name: (shape, dtype)} of a batch of ``shape`` laid out as ``template``
    (a collated batch of another shape); None when the layout does not follow
    from the shape alone (other ragged columns have widths of their own)."""
    token_keys = {f"{length_column}{s}" for s in keys.TOKEN_SUFFIXES}
    ragged = {k for k in template if k.endswith(keys.MASK) and k != keys.mask(length_column)}
    if ragged:
        return None
    spec = {}
    for k, v in template.items():
        dims = list(v.shape)
        dims[0] = shape.rows
        if k in token_keys:
            dims[1] = shape.length
        elif packed and len(dims) >= 2:
            dims[1] = shape.segments
        spec[k] = (tuple(dims), v.dtype)
    return spec

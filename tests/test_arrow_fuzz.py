"""Arrow input that lies about its buffers, fuzzed: the only allowed outcomes
are a correct result or a clear ValueError / OSError.

Three targets, each a hypothesis test:
  * builders: arrays made with pyarrow's low-level builders
    (``pa.Array.from_buffers``, list / large_list / fixed_size_list levels)
    from drawn buffers, with inconsistent offsets, declared lengths, null
    bitmaps and counts, slicing offsets and buffer sizes. What pyarrow's
    builders accept goes to ``Dataset.from_arrow``, ``jb.collate`` and a
    ``jb.Loader``; a valid array must give exactly a NumPy reference decoded
    from the same buffers by hand.
  * IPC bytes: a valid table written as an Arrow IPC file or stream with
    its declared lengths, null counts, buffer offsets and sizes and its
    offsets edited (tests/arrow_craft.py), read memory-mapped and by a
    ``jb.Loader`` on the path.
  * Parquet bytes: a small Parquet file with bytes changed or cut, opened by
    a ``jb.Loader`` (read whole and streamed) and ``jaxbatch plan``: every
    failure names the file.

A read past a buffer need not crash where it happens, so the targets run in
a child process (test_fuzz_targets_in_a_subprocess): a signal fails the
test with the example that caused it, and a wrong result fails the
comparison with the reference. The engine's own check is fuzzed under
ASan by cc/fuzz/collate_fuzzer.cc.
"""

from __future__ import annotations

import dataclasses
import io
import os
import signal
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import jaxbatch as jb

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from arrow_craft import ipc_bytes, read_int64, record_batches, write_int64  # noqa: E402

CHILD = "JAXBATCH_ARROW_FUZZ_CHILD"  # set in the child process: the targets run there
LAST = "JAXBATCH_ARROW_FUZZ_LAST"  # the child writes each example here before running it
CHILD_TIMEOUT_S = 240
in_child = pytest.mark.skipif(
    os.environ.get(CHILD) != "1",
    reason="run in a child process by test_fuzz_targets_in_a_subprocess",
)

LEAVES = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "uint16": pa.uint16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
}
# Offsets and declared lengths are perturbed to these: around the true value,
# negative, and far past any buffer.
FAR = [-1, 2**31 - 1, 10_000_000, 2**62]


def record(text: str) -> None:
    """Writes the example about to run where the parent finds it on a crash."""
    path = os.environ.get(LAST)
    if path:
        Path(path).write_text(text)


# ---- drawn arrays: buffers and how a builder is told to read them ----------


@dataclasses.dataclass
class Level:
    """One array level as drawn: what from_buffers is given."""

    type: pa.DataType
    length: int  # declared
    offset: int  # the slicing offset from_buffers is given
    null_count: int  # declared; -1: pyarrow counts
    validity: bytes | None
    data: bytes | None  # the values (a leaf) or the offsets (a list)
    child: Level | None = None

    def build(self):
        children = [self.child.build()] if self.child is not None else None
        buffers = [
            None if self.validity is None else pa.py_buffer(self.validity),
            *([] if pa.types.is_fixed_size_list(self.type) else [pa.py_buffer(self.data)]),
        ]
        return pa.Array.from_buffers(
            self.type, self.length, buffers, self.null_count, self.offset, children
        )


def _bits(values: list[bool]) -> bytes:
    return np.packbits(np.array(values, bool), bitorder="little").tobytes()


@st.composite
def levels(draw, rows: int, leaf: str, sizes: list[int], top: str, perturb: bool) -> Level:
    """A level of `rows` rows in use below a slicing offset; `top` is "list",
    "large_list" or "fixed" (sizes: the fixed_size_list levels below)."""
    offset = draw(st.integers(0, 2))
    physical = offset + rows + draw(st.integers(0, 2))
    length = rows
    if perturb and draw(st.integers(0, 5)) == 0:
        length = draw(st.sampled_from([rows + 1, max(rows - 1, 0), *FAR]))
    validity, null_count = None, 0
    if draw(st.integers(0, 3)) == 0:
        valid = draw(st.lists(st.integers(0, 7).map(bool), min_size=physical, max_size=physical))
        validity = _bits(valid)
        null_count = -1
        if perturb and draw(st.booleans()):
            null_count = draw(st.integers(0, physical + 1))
    if top in ("list", "large_list"):
        first = draw(st.integers(0, 2))
        steps = draw(st.lists(st.integers(0, 3), min_size=physical, max_size=physical))
        offsets = [first, *(first + int(v) for v in np.cumsum(steps))]
        child_rows = offsets[-1]
        if perturb and draw(st.integers(0, 3)) == 0:
            k = draw(st.integers(0, len(offsets) - 1))
            offsets[k] = draw(st.sampled_from([offsets[k] + 1, offsets[k] - 1, *FAR]))
        dtype = np.int64 if top == "large_list" else np.int32
        data = np.array(offsets).astype(dtype).tobytes()
        inner = "fixed" if sizes else "leaf"
        child = draw(levels(child_rows, leaf, sizes, inner, perturb))
        value_type = child.type
        list_type = pa.large_list(value_type) if top == "large_list" else pa.list_(value_type)
        return Level(list_type, length, offset, null_count, validity, data, child)
    if top == "fixed" and sizes:
        child = draw(
            levels(physical * sizes[0], leaf, sizes[1:], "fixed" if sizes[1:] else "leaf", perturb)
        )
        return Level(
            pa.list_(child.type, sizes[0]), length, offset, null_count, validity, None, child
        )
    arrow = LEAVES[leaf]
    if leaf == "bool":
        data = _bits(draw(st.lists(st.booleans(), min_size=physical, max_size=physical)))
    else:
        width = arrow.bit_width // 8
        data = draw(st.binary(min_size=physical * width, max_size=physical * width))
    if perturb and draw(st.integers(0, 4)) == 0:
        cut = draw(st.integers(1, max(1, len(data))))
        data = data[:-cut] if draw(st.booleans()) else data + bytes(cut)
    return Level(arrow, length, offset, null_count, validity, data)


@st.composite
def columns(draw, perturb: bool = True) -> Level:
    top = draw(st.sampled_from(["list", "large_list", "fixed"]))
    sizes = draw(st.lists(st.integers(1, 3), max_size=2))
    leaf = draw(st.sampled_from(sorted(LEAVES)))
    return draw(levels(draw(st.integers(0, 6)), leaf, sizes, top, perturb))


# ---- the reference: the same buffers decoded by hand ------------------------


class ReadsPastChild(Exception):
    """A row in use reads past its child's declared length. Arrow's
    validation misses one such case: a fixed_size_list whose offset plus
    length, times its size, exceeds its child (pyarrow 26 checks the length
    only); the engine must refuse it."""


def decode(level: Level, rows: range | None = None) -> list:
    """The value (None for a null) of each of `rows` (logical rows; default
    all) of a level Arrow validates: a leaf's number, or a list of its
    child's rows for a list or fixed_size_list."""
    out = []
    for i in range(level.length) if rows is None else rows:
        if not 0 <= i < level.length:
            raise ReadsPastChild(f"row {i} of a {level.type} of length {level.length}")
        p = level.offset + i  # the physical row
        if level.validity is not None and level.null_count != 0:
            bits = np.unpackbits(np.frombuffer(level.validity, np.uint8), bitorder="little")
            if not bits[p]:
                out.append(None)
                continue
        if pa.types.is_fixed_size_list(level.type):
            size = level.type.list_size
            out.append(decode(level.child, range(p * size, (p + 1) * size)))
        elif level.child is not None:
            wide = pa.types.is_large_list(level.type)
            offsets = np.frombuffer(level.data, np.int64 if wide else np.int32)
            out.append(decode(level.child, range(offsets[p], offsets[p + 1])))
        elif pa.types.is_boolean(level.type):
            out.append(
                bool(np.unpackbits(np.frombuffer(level.data, np.uint8), bitorder="little")[p])
            )
        else:
            dtype = np.dtype(level.type.to_pandas_dtype())
            out.append(np.frombuffer(level.data, dtype, count=1, offset=p * dtype.itemsize)[0])
    return out


def has_null(value) -> bool:
    return value is None or (isinstance(value, list) and any(map(has_null, value)))


def leaf_dtype(arrow_type) -> np.dtype:
    while not pa.types.is_primitive(arrow_type):
        arrow_type = arrow_type.value_type
    return np.dtype(bool) if pa.types.is_boolean(arrow_type) else arrow_type.to_pandas_dtype()


def inner_shape(arrow_type) -> list[int]:
    shape = []
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        arrow_type = arrow_type.value_type
    while pa.types.is_fixed_size_list(arrow_type):
        shape.append(arrow_type.list_size)
        arrow_type = arrow_type.value_type
    return shape


def reference_example(value, arrow_type) -> np.ndarray:
    ragged = pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)
    shape = ([-1] if ragged else []) + inner_shape(arrow_type)
    return np.array(value, dtype=leaf_dtype(arrow_type)).reshape(shape)


# ---- the checks ---------------------------------------------------------------


def is_valid(array) -> bool:
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def with_lengths(table):
    """`table` with a list column "t" to batch by (a fixed column alone has no lengths)."""
    lengths = [[0] * (i % 3 + 1) for i in range(table.num_rows)]
    return table.append_column("t", pa.array(lengths, pa.list_(pa.int8())))


def check_batches(batches, reference: list[np.ndarray], ragged: bool, name: str = "x") -> None:
    """Every example in the batches equals its reference, each exactly once."""
    seen = []
    for batch in batches:
        for r, e in enumerate(np.asarray(batch["example_index"]).reshape(-1)):
            if e < 0:
                continue
            seen.append(int(e))
            want = reference[e]
            got = batch[name][r, : len(want)] if ragged else batch[name][r]
            np.testing.assert_array_equal(got, want)
            if ragged:
                assert batch[f"{name}_lengths"][r] == len(want)
    assert sorted(seen) == list(range(len(reference)))


def expect_refused(run, *needles: str) -> None:
    with pytest.raises((ValueError, OSError)) as caught:
        run()
    for needle in needles:
        assert needle in str(caught.value), (needle, str(caught.value))


def check_table(table, reference: list | None, arrow_type) -> bool:
    """`table` (columns "x", then "t") through Dataset.from_arrow, jb.collate
    and a Loader: equal to `reference` (the values of "x"), or refused
    naming the first column that is bad: "x" when Arrow finds it invalid
    (`reference` None) or it has a null, else "t" when Arrow finds it
    invalid. Returns whether the table was good."""
    if reference is None:
        expect_refused(lambda: jb.Dataset.from_arrow(table), "'x'")
        return False
    if any(has_null(v) for v in reference):
        expect_refused(lambda: jb.Dataset.from_arrow(table), "'x'", "null")
        return False
    if not is_valid(table.column("t")):
        expect_refused(lambda: jb.Dataset.from_arrow(table), "'t'")
        return False
    want = [reference_example(v, arrow_type) for v in reference]
    ragged = pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)
    ds = jb.Dataset.from_arrow(table)
    assert len(ds) == len(want)
    for i, w in enumerate(want):
        np.testing.assert_array_equal(ds.example(i)["x"], w)
    if not want:
        return True
    column = "x" if ragged else "t"
    plan = jb.plan(ds, jb.PadToMax(3), column=column)
    check_batches([jb.collate(ds, spec) for spec in plan], want, ragged)
    with jb.Loader(ds, jb.PadToMax(3), column=column, shuffle=False, num_threads=2) as loader:
        check_batches(list(loader), want, ragged)
    return True


# ---- the targets --------------------------------------------------------------


@in_child
@given(column=columns())
def test_builders_give_the_reference_or_a_clear_error(column):
    record(f"builders: {column!r}")
    try:
        array = column.build()
    except (pa.ArrowInvalid, ValueError, TypeError, OverflowError):
        event("refused by pyarrow's builder")
        return
    # The array, and (Array.slice) its second half: a slice's null count is
    # counted again from the bitmap when its parent declares any.
    at = len(array) // 2
    sliced = dataclasses.replace(
        column,
        offset=column.offset + at,
        length=column.length - at,
        null_count=0 if column.null_count == 0 else -1,
    )
    # And both as the two chunks of one column (each read in place).
    for a, levels_of in (
        (array, [column]),
        (array.slice(at), [sliced]),
        (pa.chunked_array([array.slice(at), array], array.type), [sliced, column]),
    ):
        try:
            table = with_lengths(pa.table({"x": a}))  # pa.table runs Array.validate()
        except pa.ArrowInvalid:
            event("refused by pa.table")
            continue
        reference = None
        if is_valid(a):
            try:
                reference = [v for level in levels_of for v in decode(level)]
            except ReadsPastChild:
                event("valid to Arrow, but reads past a child")
        event(f"valid: {reference is not None}")
        check_table(table, reference, a.type)


def _mutations(layout_fields: list[int]):
    return st.lists(
        st.tuples(
            st.sampled_from(layout_fields),
            st.one_of(st.integers(-2, 2), st.sampled_from(FAR)),
            st.booleans(),  # True: add the value to the field, False: set it
        ),
        min_size=1,
        max_size=3,
    )


@in_child
@given(data=st.data(), stream=st.booleans())
def test_ipc_files_give_the_reference_or_a_clear_error(data, stream, tmp_path_factory):
    column = data.draw(columns(perturb=False))
    array = column.build()  # consistent: what a writer writes
    raw = bytearray(ipc_bytes(with_lengths(pa.table({"x": array})), stream=stream))
    fields = [pos for batch in record_batches(bytes(raw)) for pos in batch.fields()]
    for pos, value, add in data.draw(_mutations(fields)) if fields else []:
        new = read_int64(raw, pos) + value if add else value
        write_int64(raw, pos, (new + 2**63) % 2**64 - 2**63)  # wraps, as an int64 would
    path = tmp_path_factory.mktemp("ipc") / "crafted.arrow"
    path.write_bytes(raw)
    record(f"ipc: {path} ({'stream' if stream else 'file'})")
    try:
        source = pa.memory_map(str(path))
        table = (pa.ipc.open_stream if stream else pa.ipc.open_file)(source).read_all()
    except (pa.ArrowException, OSError):
        event("refused by pyarrow's IPC reader")
        expect_refused(lambda: jb.Loader(path, jb.PadToMax(3), column="t"), str(path))
        return
    x = table.column("x")
    reference = x.to_pylist() if is_valid(x) else None
    good = check_table(table, reference, x.type)
    event(f"read; good: {good}")
    if not good:
        expect_refused(lambda: list(jb.Loader(path, jb.PadToMax(3), column="t")), str(path))
        return
    want = [reference_example(v, x.type) for v in reference]
    ragged = pa.types.is_list(x.type) or pa.types.is_large_list(x.type)
    with jb.Loader(path, jb.PadToMax(3), column="t", shuffle=False) as loader:
        check_batches(list(loader), want, ragged)


def _parquet_file() -> bytes:
    tokens = [list(range(i % 5 + 1)) for i in range(24)]
    table = pa.table(
        {"tokens": pa.array(tokens, pa.list_(pa.int32())), "label": np.arange(24, dtype=np.int64)}
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=8, compression="none")
    return sink.getvalue()


PARQUET = _parquet_file()


@in_child
@given(
    changes=st.lists(
        st.tuples(st.integers(0, len(PARQUET) - 1), st.integers(0, 255)), min_size=1, max_size=4
    ),
    cut=st.one_of(st.none(), st.integers(1, len(PARQUET) - 1)),
)
def test_mutated_parquet_files_fail_naming_the_file(changes, cut, tmp_path_factory):
    raw = bytearray(PARQUET)
    for pos, byte in changes:
        raw[pos] = byte
    if cut is not None:
        raw = raw[:cut]
    path = tmp_path_factory.mktemp("parquet") / "mutated.parquet"
    path.write_bytes(raw)
    record(f"parquet: {path}")
    for options in (dict(stream=False), dict(stream=True, host_memory_limit=1 << 20)):
        try:
            with jb.Loader(path, jb.PadToMax(4), shuffle=False, **options) as loader:
                batches = list(loader)
        except (ValueError, OSError) as e:
            event(f"refused: {type(e).__name__}")
            assert str(path) in str(e), str(e)
            continue
        event("read")
        if batches:  # By the first list column, whatever the mutation named it.
            name = batches[0].length_column
            want = [np.array(t) for t in pq.read_table(path).column(name).to_pylist()]
            check_batches(batches, want, ragged=True, name=name)
    from jaxbatch._src.cli.main import main

    stderr = io.StringIO()
    with redirect_stderr(stderr), redirect_stdout(io.StringIO()):
        try:
            code = main(["plan", str(path)])
        except SystemExit as e:
            code = e.code
    assert code in (0, 2), (code, stderr.getvalue())
    if code:
        assert str(path) in stderr.getvalue(), stderr.getvalue()


# ---- run in a child process ---------------------------------------------------


@pytest.mark.skipif(os.environ.get(CHILD) == "1", reason="the child runs the targets")
def test_fuzz_targets_in_a_subprocess(tmp_path):
    """The targets above, in a child pytest: a read past a buffer that kills
    it with a signal fails here with the example that did it."""
    last = tmp_path / "last-example.txt"
    env = dict(os.environ, **{CHILD: "1", LAST: str(last)}, JAX_PLATFORMS="cpu")
    command = [sys.executable, "-m", "pytest", "-o", "addopts=-q", "-p", "no:cacheprovider"]
    command += ["--hypothesis-show-statistics", __file__]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            env=env,
            cwd=Path(__file__).parent.parent,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the fuzz targets hung past {CHILD_TIMEOUT_S} s: {_last(last)}\n{e.stdout}")
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        pytest.fail(f"the fuzz targets died of {name} on {_last(last)}\n{done.stderr[-4000:]}")
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-4000:]
    assert "3 passed" in done.stdout, done.stdout[-2000:]


def _last(path: Path) -> str:
    return path.read_text() if path.exists() else "(no example recorded)"

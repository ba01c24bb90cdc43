"""The Python API under random, hostile input: every outcome is either a
correct result (checked against a NumPy reference) or a ValueError,
TypeError or OverflowError whose message names the offending argument.
Nothing crashes, hangs or answers wrongly in silence.

Random datasets (float16, bool, int8, uint64, big-endian, empty examples,
one long example), random planner options with values near 2**31, 2**53 and
2**63, and random (often malformed) loader states.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxbatch as jb

DTYPES = ["float16", "float32", "bool", "int8", "uint8", "int32", "uint64", ">i4", ">f8"]
EXTREMES = [2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64]
#: Collate only batches this small; bigger ones are checked through the plan.
MAX_ELEMENTS = 200_000


@st.composite
def datasets(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    n = draw(st.integers(1, 12))
    lengths = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    if draw(st.booleans()):
        lengths[draw(st.integers(0, n - 1))] = draw(st.integers(100, 3000))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    values = [rng.integers(0, 100, k).astype(dtype) for k in lengths]
    return values, lengths


def sizes(small_max: int = 16):
    return st.one_of(st.integers(1, small_max), st.sampled_from(EXTREMES), st.integers(-3, 0))


@st.composite
def planners(draw):
    """A planner to build (a function): building validates it, so a bad draw
    must be refused there, by the engine, naming the option."""
    kind = draw(st.sampled_from(["pad", "fixed", "auto", "pack"]))
    if kind == "pad":
        size, multiple = draw(sizes()), draw(st.one_of(st.none(), sizes(8)))
        if multiple is None:
            return lambda: jb.PadToMax(size)
        return lambda: jb.PadToMax(size, pad_to_multiple=multiple)
    if kind == "fixed":
        bounds = sorted(set(draw(st.lists(sizes(64), min_size=1, max_size=3))))
        size = draw(sizes())
        return lambda: jb.FixedBuckets(bounds, batch_size=size, too_long="skip")
    if kind == "auto":
        shapes = draw(sizes(6))
        if draw(st.booleans()):
            budget = draw(sizes(4096))
            return lambda: jb.AutoBuckets(shapes, token_budget=budget)
        size = draw(sizes())
        return lambda: jb.AutoBuckets(shapes, batch_size=size)
    length, rows = draw(sizes(64)), draw(sizes(4))
    return lambda: jb.Pack(row_length=length, rows_per_batch=rows, too_long="truncate")


OPTION_NAMES = (
    "batch_size",
    "pad_to_multiple",
    "boundaries",
    "max_shapes",
    "token_budget",
    "row_length",
    "rows_per_batch",
    "max_segments_per_row",
)


def assert_names_an_option(error: Exception) -> None:
    message = str(error)
    assert any(name in message for name in OPTION_NAMES), f"no option named in: {message!r}"
    assert "incompatible function arguments" not in message, message  # No nanobind dump.


def check_batch(batch, values, lengths) -> None:
    """The collated batch against the examples it names: every real token in
    place, the padding beyond each example's length."""
    index = np.asarray(batch["example_index"])
    x = np.asarray(batch["x"])
    if index.ndim == 1:  # Padded: one example per row.
        for r, e in enumerate(index):
            if e < 0:
                continue
            n = min(lengths[e], x.shape[1])
            np.testing.assert_array_equal(x[r, :n], values[e][:n].astype(x.dtype))
            assert batch["x_mask"][r, :n].all() and not batch["x_mask"][r, n:].any()
    else:  # Packed: segments in order within each row.
        ids = np.asarray(batch["x_segment_ids"])
        for r in range(index.shape[0]):
            for s, e in enumerate(index[r]):
                if e < 0:
                    continue
                got = x[r][ids[r] == s + 1]
                want = values[e][: len(got)].astype(x.dtype)
                assert len(got) == min(lengths[e], x.shape[1])
                np.testing.assert_array_equal(got, want)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets(), planners())
def test_plan_and_collate_are_correct_or_refuse_clearly(data, make_planner):
    values, lengths = data
    ds = jb.Dataset.from_arrays({"x": values})
    try:
        planner = make_planner()
        plan = jb.plan(ds, planner)
    except (ValueError, TypeError, OverflowError) as e:
        assert_names_an_option(e)
        return
    stats = plan.stats
    skipped = {int(e) for e in plan.skipped_examples}
    dropped = {int(e) for e in plan.dropped_examples}
    kept = [e for e in range(len(lengths)) if e not in skipped | dropped]
    cap = getattr(planner, "row_length", None)
    want_real = sum(min(lengths[e], cap) if cap else lengths[e] for e in kept)
    assert stats.real_elements == want_real
    assert 0 <= stats.real_elements <= stats.padded_elements
    seen = sorted(int(e) for spec in plan for e in np.asarray(spec.example_ids).ravel() if e >= 0)
    assert seen == kept
    for spec in plan:
        shape = spec.shape
        if shape.rows * max(shape.length, 1) > MAX_ELEMENTS:
            continue
        check_batch(jb.collate(ds, spec), values, lengths)


@settings(max_examples=80, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "epoch": st.one_of(st.integers(-2, 3), st.sampled_from(EXTREMES), st.text(max_size=3)),
            "step": st.one_of(st.integers(-2, 50), st.sampled_from(EXTREMES), st.none()),
            "seed": st.one_of(st.integers(0, 5), st.sampled_from(EXTREMES)),
            "version": st.integers(0, 3),
            "junk": st.integers(),
        },
    )
)
def test_a_malformed_loader_state_is_refused_with_a_clear_error(changes):
    ds = jb.Dataset.from_arrays({"x": [np.arange(n) for n in range(1, 9)]})
    loader = jb.Loader(ds, jb.PadToMax(2), shuffle=True, seed=1, epochs=2)
    next(iter(loader))
    state = dict(loader.get_state())
    loader.close()
    state.update(changes)
    try:
        restored = jb.Loader(ds, jb.PadToMax(2), shuffle=True, seed=1, epochs=2, state=state)
    except (ValueError, TypeError, OverflowError) as e:
        assert "state" in str(e), str(e)
        return
    with restored:
        batches = list(restored)
    # Accepted: a valid position, so the stream is a suffix of a fresh run's.
    fresh = [
        b["example_index"].tolist()
        for b in jb.Loader(
            ds,
            jb.PadToMax(2),
            shuffle=True,
            seed=state["seed"] if "seed" in changes else 1,
            epochs=2,
        )
    ]
    got = [b["example_index"].tolist() for b in batches]
    assert got == fresh[len(fresh) - len(got) :]


@pytest.mark.parametrize("dtype", [">i4", ">f8", ">u2"])
def test_big_endian_values_are_read_as_numbers(dtype):
    values = [np.array([1, 2, 3], dtype), np.array([7], dtype)]
    ds = jb.Dataset.from_arrays({"x": values})
    batch = jb.collate(ds, jb.plan(ds, jb.PadToMax(2))[0])
    np.testing.assert_array_equal(batch["x"], [[1, 2, 3], [7, 0, 0]])

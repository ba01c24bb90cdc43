"""explain_broadcast against np.broadcast_shapes and JAX, its message, and strict_broadcasting."""

import functools
import operator
import re
import threading

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jaxbatch._src.ops.broadcast import (
    BroadcastError,
    _mismatch_fixes,
    _promotion_fixes,
    explain_broadcast,
    strict_broadcasting,
)

# Small sides make equal, 1 and conflicting sizes all common.
random_shapes = st.lists(
    hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=3), min_size=0, max_size=4
)
broadcastable_shapes = (
    st.integers(1, 4)
    .flatmap(
        lambda n: hnp.mutually_broadcastable_shapes(
            num_shapes=n, min_dims=0, max_dims=4, max_side=4
        )
    )
    .map(lambda r: list(r.input_shapes))
)
shape_lists = st.one_of(random_shapes, broadcastable_shapes)


def numpy_reference(shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None


@given(shape_lists)
def test_matches_numpy(shapes):
    expected = numpy_reference(shapes)
    if expected is None:
        with pytest.raises(BroadcastError) as info:
            explain_broadcast(*shapes)
        assert info.value.shapes == tuple(shapes)
        assert "^" in str(info.value)
    else:
        assert explain_broadcast(*shapes) == expected
        # Arrays are read by their .shape.
        assert explain_broadcast(*(np.zeros(s) for s in shapes)) == expected


@given(shape_lists)
def test_without_rank_promotion_matches_jax(shapes):
    """allow_rank_promotion=False raises exactly when JAX's "raise" mode refuses the shapes."""
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    with jax.numpy_rank_promotion("raise"):
        try:
            jax_result = jax.eval_shape(lambda *xs: functools.reduce(operator.add, xs), *args)
        except (TypeError, ValueError):  # lax: incompatible shapes; jnp: rank promotion
            jax_result = None
    if not shapes:
        jax_result = jax.ShapeDtypeStruct((), jnp.float32)
    if jax_result is None:
        with pytest.raises(BroadcastError):
            explain_broadcast(*shapes, allow_rank_promotion=False)
    else:
        assert explain_broadcast(*shapes, allow_rank_promotion=False) == jax_result.shape


def _evaluate(fix, shapes, names):
    """The fix's expression run on NumPy arrays: its shape, and the broadcast shape after it."""
    arrays = {n: np.zeros(s) for n, s in zip(names, shapes, strict=True)}
    fixed = eval(fix.expr, {"jnp": np, **arrays})  # NumPy spells these functions as jnp does
    others = [s for i, s in enumerate(shapes) if i != fix.arg]
    return fixed.shape, np.broadcast_shapes(fixed.shape, *others)


@given(shape_lists)
def test_suggested_fixes_work(shapes):
    """Every suggested expression, evaluated, has the shape it claims and broadcasts."""
    names = [f"arg{i}" for i in range(len(shapes))]
    if numpy_reference(shapes) is None:
        rank = max(len(s) for s in shapes)
        conflicts = [
            a for a in range(-rank, 0) if len({s[a] for s in shapes if len(s) >= -a} - {1}) > 1
        ]
        fixes, _ = _mismatch_fixes(shapes, names, conflicts)
    else:
        fixes = _promotion_fixes(shapes, names, numpy_reference(shapes))
    for fix in fixes:
        assert _evaluate(fix, shapes, names) == (fix.shape, fix.result)


GOLDEN_INSERT_AXIS = """\
cannot broadcast x (3,), y (3, 4): sizes differ at axis -1: 3 in x (its axis 0), 4 in y (its axis 1)
  arg     shape  |  -2  -1
  x       (3,)   |   -   3
  y       (3, 4) |   3   4
  result         |   3   ?
                 |       ^
shapes line up from the right; at each axis the sizes must be equal or 1
("-": the argument lacks the axis, which counts as size 1)
possible fixes (each checked to broadcast):
  x[:, None]  # x becomes (3, 1); result (3, 4)
  y.T         # y becomes (4, 3); result (4, 3)"""


def test_golden_insert_axis():
    with pytest.raises(BroadcastError) as info:
        explain_broadcast(np.ones(3), (3, 4), names=["x", "y"])
    assert str(info.value) == GOLDEN_INSERT_AXIS
    assert info.value.names == ("x", "y")
    assert isinstance(info.value, ValueError)


def test_golden_transpose():
    with pytest.raises(BroadcastError) as info:
        explain_broadcast((4, 3), (3, 4), names=["a", "b"])
    lines = str(info.value).splitlines()
    assert lines[0].startswith("cannot broadcast a (4, 3), b (3, 4): sizes differ at axis -2")
    assert lines[1:6] == [
        "  arg     shape  |  -2  -1",
        "  a       (4, 3) |   4   3",
        "  b       (3, 4) |   3   4",
        "  result         |   ?   ?",
        "                 |   ^   ^",
    ]
    assert "  a.T  # a becomes (3, 4); result (3, 4)" in lines
    assert not any("None]" in line for line in lines)  # no outer-product suggestion


def test_moveaxis_for_higher_rank():
    with pytest.raises(BroadcastError) as info:
        explain_broadcast((2, 3, 4), (4, 2, 3), names=["x", "y"])
    assert re.search(r"\n  jnp\.moveaxis\(x, 2, 0\) +# x becomes \(4, 2, 3\)", str(info.value))


def test_outer_product_only_as_last_resort():
    with pytest.raises(BroadcastError) as info:
        explain_broadcast((4,), (3,), names=["x", "y"])
    message = str(info.value)
    assert "an outer product" in message
    assert "x[:, None]  # x becomes (4, 1); result (4, 3)" in message


def test_rank_promotion_flagged():
    assert explain_broadcast((3,), (2, 3)) == (2, 3)
    with pytest.raises(BroadcastError) as info:
        explain_broadcast((3,), (2, 3), names=["x", "y"], allow_rank_promotion=False)
    lines = str(info.value).splitlines()
    assert lines[0] == (
        "implicit rank promotion: x (3,) (rank 1) would get leading axes to match the result "
        "(2, 3) (rank 2)"
    )
    assert lines[2:7] == [
        "  arg     shape  |  -2  -1",
        "  x       (3,)   |   -   3",
        "  y       (2, 3) |   2   3",
        "  result  (2, 3) |   2   3",
        "                 |   ^",
    ]
    assert "  jnp.broadcast_to(x, (2, 3))  # x becomes (2, 3); result (2, 3)" in lines
    assert any(line.startswith("  x[None]") for line in lines)


def test_scalars_are_not_rank_promotion():
    """As in JAX: `x * 2.0` is fine in "raise" mode."""
    assert explain_broadcast((), (2, 3), allow_rank_promotion=False) == (2, 3)
    assert explain_broadcast((1, 3), (2, 1), allow_rank_promotion=False) == (2, 3)


def test_bad_arguments():
    assert explain_broadcast() == ()
    with pytest.raises(ValueError, match="2 arguments but 1 names"):
        explain_broadcast((1,), (2,), names=["x"])
    with pytest.raises(TypeError, match="arg1 must be an array"):
        explain_broadcast((1,), 3.0)
    with pytest.raises(TypeError, match="expected integer sizes"):
        explain_broadcast((1.5, 2))
    with pytest.raises(ValueError, match="sizes must be >= 0"):
        explain_broadcast((2, -1))


# strict_broadcasting --------------------------------------------------------------------------


def add(a, b):
    return a + b


def assert_explained(error: BroadcastError):
    assert isinstance(error.__cause__, ValueError)
    assert "jax_numpy_rank_promotion" in str(error.__cause__)
    message = str(error)
    assert message.startswith("in jnp.add: implicit rank promotion: arg0 (3,) (rank 1)")
    assert "  arg0    (3,)   |   -   3" in message
    assert "jnp.broadcast_to(arg0, (2, 3))" in message
    assert error.shapes == ((3,), (2, 3))


def test_strict_context_manager():
    with pytest.raises(BroadcastError) as info:
        with strict_broadcasting():
            jnp.ones(3) + jnp.ones((2, 3))
    assert_explained(info.value)
    with strict_broadcasting():  # equal ranks and scalars still broadcast
        assert (jnp.ones((1, 3)) + jnp.ones((2, 3))).shape == (2, 3)
        assert (jnp.ones((2, 3)) * 2.0).shape == (2, 3)
    assert (jnp.ones(3) + jnp.ones((2, 3))).shape == (2, 3)  # outside: allowed again


def test_strict_mismatch_and_rank_explained_together():
    with pytest.raises(BroadcastError, match=r"cannot broadcast arg0 \(3,\), arg1 \(2, 4\)"):
        with strict_broadcasting():
            jnp.ones(3) * jnp.ones((2, 4))


@pytest.mark.parametrize("parens", [False, True])
def test_strict_decorator(parens):
    strict_add = strict_broadcasting()(add) if parens else strict_broadcasting(add)
    assert strict_add.__name__ == "add"
    assert strict_add(jnp.ones((2, 3)), jnp.ones((2, 3))).shape == (2, 3)
    with pytest.raises(BroadcastError) as info:
        strict_add(jnp.ones(3), jnp.ones((2, 3)))
    assert_explained(info.value)
    assert jax.numpy_rank_promotion.value == "allow"


def test_strict_decorator_inside_jit():
    strict_add = jax.jit(strict_broadcasting(add))  # the check runs while tracing
    assert strict_add(jnp.ones((2, 3)), jnp.ones((2, 3))).shape == (2, 3)
    with pytest.raises(BroadcastError) as info:
        strict_add(jnp.ones(3), jnp.ones((2, 3)))
    assert_explained(info.value)


def test_strict_decorator_outside_jit_retraces():
    jitted = jax.jit(add)
    assert jitted(jnp.ones(3), jnp.ones((2, 3))).shape == (2, 3)  # compiled, promotion allowed
    with pytest.raises(BroadcastError) as info:
        strict_broadcasting(jitted)(jnp.ones(3), jnp.ones((2, 3)))
    assert_explained(info.value)


def test_jit_cache_respects_strict_context():
    """The setting is part of jit's cache key: a function compiled outside is traced again
    inside (and raises), and the compiled version outside is still used outside."""
    jitted = jax.jit(add)
    a, b = jnp.ones(3), jnp.ones((2, 3))
    assert jitted(a, b).shape == (2, 3)
    with pytest.raises(BroadcastError) as info:
        with strict_broadcasting():
            jitted(a, b)
    assert_explained(info.value)
    assert jitted(a, b).shape == (2, 3)


def test_setting_restored():
    before = jax.numpy_rank_promotion.value
    with strict_broadcasting():
        assert jax.numpy_rank_promotion.value == "raise"
    assert jax.numpy_rank_promotion.value == before
    with pytest.raises(BroadcastError), strict_broadcasting():
        jnp.ones(3) + jnp.ones((2, 3))
    assert jax.numpy_rank_promotion.value == before
    with pytest.raises(KeyError), strict_broadcasting():  # other errors pass through unchanged
        raise KeyError("unrelated")
    assert jax.numpy_rank_promotion.value == before


def test_global_setting_restored():
    jax.config.update("jax_numpy_rank_promotion", "warn")
    try:
        with pytest.raises(BroadcastError), strict_broadcasting():
            jnp.ones(3) + jnp.ones((2, 3))
        assert jax.numpy_rank_promotion.value == "warn"
    finally:
        jax.config.update("jax_numpy_rank_promotion", "allow")


def test_nested_and_reused():
    strict = strict_broadcasting()
    with pytest.raises(BroadcastError) as info:
        with strict:
            with strict:
                jnp.ones(3) + jnp.ones((2, 3))
            raise AssertionError("not reached")
    assert not isinstance(info.value.__cause__, BroadcastError)  # converted once
    assert jax.numpy_rank_promotion.value == "allow"


def test_unrelated_value_error_untouched():
    with pytest.raises(ValueError, match="^mine$") as info, strict_broadcasting():
        raise ValueError("mine")
    assert not isinstance(info.value, BroadcastError)


def test_strict_is_per_thread():
    seen = []
    with strict_broadcasting():
        thread = threading.Thread(target=lambda: seen.append(jax.numpy_rank_promotion.value))
        thread.start()
        thread.join()
    assert seen == ["allow"]


def test_strict_rejects_non_callable():
    with pytest.raises(TypeError, match="function to decorate"):
        strict_broadcasting(42)


def test_strict_vectorize():
    add_loop = jnp.vectorize(add)
    with pytest.raises(BroadcastError, match=r"^in jnp\.vectorize: implicit rank promotion"):
        with strict_broadcasting():
            add_loop(jnp.ones(3), jnp.ones((2, 3)))
    # With core dimensions JAX compares loop ranks only; its own message is kept.
    add_rows = jnp.vectorize(add, signature="(n),(n)->(n)")
    with pytest.raises(BroadcastError, match="signature \\(n\\),\\(n\\)->\\(n\\)") as info:
        with strict_broadcasting():
            add_rows(jnp.ones(3), jnp.ones((2, 3)))
    assert isinstance(info.value.__cause__, ValueError)

"""jb.plan(..., order=) plans exactly the listed examples, with every
planner (issue 38, item 3): an empty order plans nothing (on main it
planned every example: a filter that matched nothing processed the whole
dataset), one id plans that example, all ids plan all, and an id listed
twice is refused with one message. The engine decides (plan/order.h); the
batches are collated, so what a plan says is what the batches hold."""

import numpy as np
import pytest

import jaxbatch as jb
from jaxbatch._src.collate import keys

N = 8
TEXT = [np.arange(n, dtype=np.int32) + 1 for n in (3, 1, 4, 1, 5, 9, 2, 6)]
TARGETS = [np.arange(n, dtype=np.int32) + 1 for n in (2, 0, 1, 3, 2, 1, 1, 2)]
SIDES = (3, 1, 4, 1, 5, 9, 2, 6)


def _text():
    return jb.Dataset.from_arrays({"tokens": TEXT})


def _two_features():
    return jb.Dataset.from_arrays({"inputs": TEXT, "targets": TARGETS})


def _images():
    images = [np.ones((h, w, 1), np.float32) for h, w in zip(SIDES, SIDES[::-1], strict=True)]
    return jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})


def _graphs():
    graphs = []
    for i, k in enumerate(SIDES):
        m = k // 2
        graphs.append(
            {
                "nodes": np.full((k, 1), i, np.float32),
                "edges": np.zeros((m, 1), np.float32),
                "senders": np.zeros(m, np.int32),
                "receivers": np.zeros(m, np.int32),
                "n_node": np.array([k]),
                "n_edge": np.array([m]),
            }
        )
    return jb.Dataset.from_graphs(graphs)


# Every planner, on data it plans.
CASES = {
    "PadToMax": (_text, jb.PadToMax(3)),
    "FixedBuckets": (_text, jb.FixedBuckets([4, 9], batch_size=2)),
    "FixedBuckets split": (_text, jb.FixedBuckets([2, 4], batch_size=2, too_long="split")),
    "AutoBuckets": (_text, jb.AutoBuckets(max_shapes=2, batch_size=2)),
    "Pack": (_text, jb.Pack(9, rows_per_batch=2)),
    "Pack split": (_text, jb.Pack(4, rows_per_batch=2, too_long="split")),
    "Pack concat_then_split": (
        _text,
        jb.Pack(4, rows_per_batch=2, algorithm="concat_then_split"),
    ),
    "Pack row lengths": (_text, jb.Pack([4, 9], rows_per_batch=2)),
    "Pack features": (_two_features, jb.Pack({"inputs": 9, "targets": 4}, rows_per_batch=2)),
    "GraphBudget": (_graphs, jb.GraphBudget(nodes=12, edges=8, graphs=4)),
    "GraphBuckets": (_graphs, jb.GraphBuckets(max_shapes=2, nodes=12, edges=8, graphs=4)),
    "PatchPack": (_images, jb.PatchPack(patch=(1, 1), row_length=81, rows_per_batch=2)),
    "PadToMax images": (_images, jb.PadToMax(3)),
    "AspectBuckets": (_images, jb.AspectBuckets(81, multiple=1, ratios=[(1, 1)], batch_size=2)),
}


def collated_examples(ds, plan) -> list[int]:
    """The examples the plan's batches hold, read from the batches (each
    piece of a split example once)."""
    seen = []
    for spec in plan:
        batch = jb.collate(ds, spec)
        key = keys.GRAPH_INDEX if batch.is_graphs else keys.EXAMPLE_INDEX
        index = np.asarray(batch[key])
        pieces = batch.get(keys.EXAMPLE_PIECE)
        first = np.ones_like(index, bool) if pieces is None else np.asarray(pieces) == 0
        seen += index[(index >= 0) & first].tolist()
    return seen


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize(
    "order",
    [None, [], [5], list(range(N))[::-1], [4, 2, 4]],
    ids=["absent", "empty", "one", "all", "duplicates"],
)
def test_every_planner_plans_exactly_its_order(name, order):
    make, planner = CASES[name]
    ds = make()
    if order is not None and len(set(order)) < len(order):
        with pytest.raises(ValueError, match=r"order\[2\] = 4 lists that example a second time"):
            jb.plan(ds, planner, order=order)
        return
    plan = jb.plan(ds, planner, order=order)
    want = list(range(N)) if order is None else order
    if isinstance(planner, jb.AspectBuckets):  # its batches need images resized first
        assert sorted(plan._core.example_ids.tolist()) == sorted(want)
    else:
        assert sorted(collated_examples(ds, plan)) == sorted(want)
    assert plan.stats.examples == len(want)
    if not want:
        assert len(plan) == 0 and plan.stats.batches == 0 and plan.stats.efficiency == 1.0
        assert str(plan.stats).startswith("0 examples in 0 batches")


def test_an_empty_order_is_numpy_or_a_list_alike():
    ds = _text()
    for empty in ([], (), np.zeros(0, np.int64), np.array([], dtype=np.int32)):
        assert len(jb.plan(ds, jb.PadToMax(2), order=empty)) == 0


def test_a_graph_fit_refuses_an_empty_or_repeating_order():
    ds = _graphs()
    with pytest.raises(ValueError, match="order must name at least one graph, found none"):
        jb.GraphBudget.fit(ds, graphs=4, order=[])
    with pytest.raises(ValueError, match=r"order\[1\] = 3 lists that graph a second time"):
        jb.GraphBuckets.fit(ds, graphs=4, max_shapes=2, order=[3, 3])

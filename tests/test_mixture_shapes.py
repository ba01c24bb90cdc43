"""Planners whose shapes follow the data, on a mixture: GraphBuckets over
two graph datasets, PatchPack and AspectBuckets over two image datasets.
The Loader picks their shapes once (the shapes a plan of the mixture's
first draws chooses; AspectBuckets' buckets from every image), so every
block's batches take shapes from one small set. Each test checks the
batches against NumPy: every drawn example's values as its source holds
them, the draws of each block those of a reference loader over the same
mixture, the token shares within docs/mixtures.md's bound at every block's
end, and a resume at a random batch equal to the uninterrupted stream."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_aspect_buckets import images_at
from test_graphs import random_graphs
from test_grid_columns import _drain, _same
from test_patch_pack_loader import _dataset, _images, _patches

import jaxbatch as jb

WEIGHTS = {"a": 0.7, "b": 0.3}
BLOCK = 16
EPOCHS = 3  # three passes over every source's examples: a dozen blocks


def graph_sources() -> dict[str, jb.Dataset]:
    return {
        "a": jb.Dataset.from_graphs(random_graphs(40, seed=1, max_nodes=4)),
        "b": jb.Dataset.from_graphs(random_graphs(25, seed=2, max_nodes=12)),
    }


def patch_sources() -> dict[str, jb.Dataset]:
    rng = np.random.default_rng(3)
    return {"a": _dataset(_images(rng, 30)), "b": _dataset(_images(rng, 20))}


ASPECT = jb.AspectBuckets(48 * 48, multiple=16, max_shapes=3, batch_size=2)


def aspect_sources() -> dict[str, jb.Dataset]:
    """Images already resized to the buckets AspectBuckets chooses for all of
    them, as the Loader requires (it never resizes)."""
    rng = np.random.default_rng(4)
    sizes = rng.integers(8, 90, size=(50, 2))
    targets = jb.plan(sizes, ASPECT).resize_to
    images = images_at(targets, seed=5)
    return {
        "a": jb.Dataset.from_arrays({"image": images[:30]}, axes={"image": ("h", "w")}),
        "b": jb.Dataset.from_arrays({"image": images[30:]}, axes={"image": ("h", "w")}),
    }


def mix(sources) -> jb.Mixture:
    return jb.Dataset.mix(sources, WEIGHTS, unit="tokens", block_size=BLOCK)


# Each case: its sources, the planner, and a reference planner that weighs
# tokens alike and picks no shapes from the data, so the schedule draws the
# same examples for both.
CASES = {
    "GraphBuckets": (
        graph_sources,
        jb.GraphBuckets(max_shapes=3, nodes=64, edges=160, graphs=8),
        jb.GraphBudget(nodes=64, edges=160, graphs=8),
    ),
    "PatchPack": (
        patch_sources,
        jb.PatchPack(patch=(2, 2), row_length=24, rows_per_batch=2),
        jb.PatchPack(patch=(2, 2), row_length=24, rows_per_batch=1, max_segments_per_row=24),
    ),
    "AspectBuckets": (aspect_sources, ASPECT, jb.PadToMax(batch_size=1)),
}


def drawn(batch) -> list[tuple[int, int]]:
    """The (source, example) of every real slot (a graph slot, a segment, a row)."""
    index = batch["graph_index"] if "graph_index" in batch else batch["example_index"]
    return [
        (int(s), int(e))
        for s, e in zip(batch["source_index"].ravel(), index.ravel(), strict=True)
        if e >= 0
    ]


def tokens_of(name: str, source: jb.Dataset) -> np.ndarray:
    """What unit="tokens" weighs: a graph's nodes, an image's 2 x 2 patches
    under PatchPack, its pixels under AspectBuckets."""
    if name == "GraphBuckets":
        return np.array([len(source[i]["nodes/x"]) for i in range(len(source))])
    cells = np.array([np.prod(source[i]["image"].shape[:2]) for i in range(len(source))])
    return cells // 4 if name == "PatchPack" else cells


def check_values(name, batch, sources) -> None:
    """Every drawn example's values in the batch equal its source's (NumPy)."""
    names = list(sources)
    if name == "GraphBuckets":
        node_graph = batch["node_graph"]
        for slot, (s, g) in enumerate(zip(batch["source_index"], batch["graph_index"],
                                          strict=True)):  # fmt: skip
            if g >= 0:
                want = sources[names[s]][int(g)]["nodes/x"]
                np.testing.assert_array_equal(batch["nodes/x"][node_graph == slot], want)
    elif name == "PatchPack":
        ids, pos = batch["image_segment_ids"], batch["image_positions"]
        for r, c in zip(*np.nonzero(ids), strict=True):
            k = ids[r, c] - 1
            image = sources[names[batch["source_index"][r, k]]][int(batch["example_index"][r, k])]
            want = _patches(image["image"])[(int(pos[r, c, 0]), int(pos[r, c, 1]))]
            np.testing.assert_array_equal(batch["image"][r, c], want)
    else:
        for r, (s, e) in enumerate(zip(batch["source_index"], batch["example_index"],
                                       strict=True)):  # fmt: skip
            if e >= 0:
                np.testing.assert_array_equal(batch["image"][r], sources[names[s]][int(e)]["image"])


def shape_of(name, batch) -> tuple:
    if name == "GraphBuckets":
        return (len(batch["n_node"]), len(batch["nodes/x"]), len(batch["senders"]))
    return tuple(batch["image"].shape) + tuple(batch["example_index"].shape)


@pytest.mark.parametrize("name", list(CASES))
def test_shapes_are_picked_once_and_batches_hold_the_draws(name):
    make, planner, reference = CASES[name]
    sources = make()
    mixture = mix(sources)
    shapes, got = set(), {}
    loader = jb.Loader(mixture, planner, seed=7, epochs=EPOCHS)
    for batch in loader:
        shapes.add(shape_of(name, batch))
        check_values(name, batch, sources)
        got.setdefault(batch.epoch, []).extend(drawn(batch))
    # Each block's draws are the reference planner's over the same mixture
    # and seed: the schedule depends on the tokens, not the planner.
    want: dict[int, list] = {}
    for batch in jb.Loader(mixture, reference, seed=7, epochs=EPOCHS):
        want.setdefault(batch.epoch, []).extend(drawn(batch))
    assert len(want) >= 8
    # One small set of shapes over every block.
    if name == "GraphBuckets":
        assert len(shapes) <= 3  # of the budget (8, 64, 160) and two chosen within it
        assert all(g <= 8 and n <= 64 and e <= 160 for g, n, e in shapes)
    elif name == "PatchPack":
        assert len(shapes) == 1  # rows, row length and segments a row: every block's
    else:
        buckets = {(h, w) for s in sources.values() for h, w in (
            s[i]["image"].shape[:2] for i in range(len(s)))}  # fmt: skip
        assert {s[1:3] for s in shapes} == buckets and len(buckets) <= 3
    assert sorted(got) == sorted(want)
    for block in want:
        assert sorted(got[block]) == sorted(want[block]), f"block {block}"
    # Token shares at every block's end within docs/mixtures.md's bound:
    # |T_s - w_s T| <= L_s + w_s (L_a + L_b) over every prefix of the stream.
    tokens = [tokens_of(name, s) for s in sources.values()]
    longest = [int(t.max()) for t in tokens]
    weights = np.array(list(WEIGHTS.values())) / sum(WEIGHTS.values())
    realised = loader.stats.sources
    for s, source in enumerate(sources):  # the stats count what the shares weigh
        assert realised[source].tokens == sum(tokens[s][e] for b in got.values() for t, e in b
                                              if t == s)  # fmt: skip
    per_source = np.zeros(2)
    for block in sorted(got):
        for s, e in got[block]:
            per_source[s] += tokens[s][e]
        for s in range(2):
            bound = longest[s] + weights[s] * sum(longest)
            assert abs(per_source[s] - weights[s] * per_source.sum()) <= bound, (block, s)


@settings(max_examples=4, deadline=None)
@given(name=st.sampled_from(list(CASES)), at=st.integers(0, 60), threads=st.integers(1, 3))
def test_a_resume_at_any_batch_equals_the_uninterrupted_stream(name, at, threads):
    make, planner, _ = CASES[name]
    mixture = mix(make())
    whole = _drain(jb.Loader(mixture, planner, seed=2, epochs=EPOCHS))
    at = min(at, len(whole))
    head = jb.Loader(mixture, planner, seed=2, epochs=EPOCHS, num_threads=threads)
    for _ in range(at):
        next(head)
    state = head.get_state()
    head.close()
    _same(_drain(jb.Loader(mixture, planner, seed=2, epochs=EPOCHS, state=state)), whole[at:])

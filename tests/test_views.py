"""Views (select, filter, concat, slices, shards): each equals its NumPy-
indexed reference, works wherever a Dataset does (Loader, jb.plan, jb.map,
jb.run, Grain), pickles as its recipe, and is told apart from another view
by its fingerprints; examples given as dicts or a generator are a source;
text is refused with a pointer to tokenizing."""

from __future__ import annotations

import pickle

import grain
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from job_functions import summarise, summarise_reference
from test_grain import examples as make_examples

import jaxbatch as jb
import jaxbatch.grain as jbg
from jaxbatch import _core

ALIGNED = [["tokens", "feats"]]


def build(examples) -> jb.Dataset:
    """The reference: a dataset of its own (copied) over `examples`."""
    return jb.Dataset.from_arrays(
        {
            "tokens": [e["tokens"] for e in examples],
            "feats": [e["feats"] for e in examples],
            "label": np.array([e["label"] for e in examples], np.int64),
        },
        aligned=ALIGNED,
        dtypes={"tokens": np.int32, "feats": np.float32},
    )


def assert_holds(view: jb.Dataset, examples) -> None:
    """`view` holds exactly `examples`, in order, as dicts of arrays."""
    assert len(view) == len(examples)
    for i, want in enumerate(examples):
        got = view[i]
        assert sorted(got) == sorted(want)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key} of {i}")


lengths_st = st.lists(st.integers(0, 12), min_size=1, max_size=30)


@given(lengths_st, st.data())
def test_select_filter_and_slices_equal_numpy_indexing(lengths, data):
    examples = make_examples(lengths)
    ds = build(examples)
    n = len(lengths)
    index = data.draw(st.lists(st.integers(-n, n - 1), max_size=40))
    assert_holds(ds.select(index), [examples[i] for i in index])
    assert_holds(ds[index], [examples[i] for i in index])
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    assert_holds(ds.filter(mask), [e for e, keep in zip(examples, mask, strict=True) if keep])
    assert_holds(ds[mask], [e for e, keep in zip(examples, mask, strict=True) if keep])
    bounds = st.none() | st.integers(-n - 2, n + 2)
    key = slice(data.draw(bounds), data.draw(bounds), data.draw(st.none() | st.integers(1, 3)))
    assert_holds(ds[key], examples[key])
    # A view of a view takes from the original data.
    inner = data.draw(st.lists(st.integers(0, max(len(index) - 1, 0)), max_size=10))
    if index:
        assert_holds(ds.select(index).select(inner), [examples[index[i]] for i in inner])


def test_filter_sees_every_column_at_once():
    examples = make_examples([3, 0, 7, 5, 1, 9])
    ds = build(examples)
    seen = {}

    def predicate(columns):
        seen["keys"] = sorted(columns)
        values, offsets = columns["tokens"]
        firsts = np.array(
            [values[a] if b > a else -1 for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
        )
        seen["firsts"] = firsts
        return (columns["tokens_lengths"] >= 3) & (columns["label"] % 2 == 0)

    view = ds.filter(predicate)
    assert seen["keys"] == ["feats", "feats_lengths", "label", "tokens", "tokens_lengths"]
    want_firsts = [e["tokens"][0] if len(e["tokens"]) else -1 for e in examples]
    np.testing.assert_array_equal(seen["firsts"], want_firsts)
    assert_holds(view, [examples[0], examples[2]])
    with pytest.raises(ValueError, match=r"expected a bool array of shape \(6,\).*found int64"):
        ds.filter(lambda c: c["label"])


def test_concat_and_shards():
    a, b = make_examples([2, 5, 1]), make_examples([4, 4], seed=1)
    both = jb.Dataset.concat([build(a), build(b)[::-1]])
    assert_holds(both, a + b[::-1])
    other = jb.Dataset.from_arrays({"tokens": [np.arange(3, dtype=np.int64)]})
    with pytest.raises(ValueError, match="dataset 1 has 1 columns but dataset 0 has 3"):
        jb.Dataset.concat([build(a), other])
    examples = make_examples(range(10))
    ds = build(examples)
    shards = [ds.shard(i, 3) for i in range(3)]
    assert [len(s) for s in shards] == [3, 3, 4]
    assert_holds(jb.Dataset.concat(shards), examples)
    with pytest.raises(ValueError, match="expected 0 <= index < count, found index 3"):
        ds.shard(3, 3)


def test_empty_selection_is_empty_everywhere():
    ds = build(make_examples([3, 4, 5]))
    for empty in (ds.select([]), ds.filter(np.zeros(3, bool)), ds[2:1]):
        assert len(empty) == 0
        assert list(jb.Loader(empty, jb.PadToMax(batch_size=2))) == []
        assert len(jb.plan(empty, jb.Pack(row_length=8, rows_per_batch=2))) == 0


def test_index_errors_name_the_position():
    ds = build(make_examples([1, 2]))
    with pytest.raises(IndexError, match="position 1 selects example 5"):
        ds.select([0, 5])
    with pytest.raises(ValueError, match="a bool mask goes to Dataset.filter"):
        ds.select(np.array([[0]]))
    with pytest.raises(IndexError, match="example 2 out of range"):
        ds[2]
    with pytest.raises(TypeError, match="Dataset indices are"):
        ds["tokens"]


def test_loader_plan_and_grain_over_a_view_equal_the_copied_reference():
    examples = make_examples(np.random.default_rng(3).integers(1, 20, 60))
    ds = build(examples)
    index = np.random.default_rng(4).permutation(60)[:40]
    view, copied = ds.select(index), build([examples[i] for i in index])
    planner = jb.Pack(row_length=32, rows_per_batch=2)
    got = list(jb.Loader(view, planner, seed=5))
    want = list(jb.Loader(copied, planner, seed=5))
    assert len(got) == len(want) > 0
    for g, w in zip(got, want, strict=True):
        for key in w:
            np.testing.assert_array_equal(g[key], w[key], err_msg=key)
    plans = [jb.plan(d, planner) for d in (view, copied)]
    assert [list(s.example_ids) for s in plans[0]] == [list(s.example_ids) for s in plans[1]]
    # Grain reads a view by index as any random-access source.
    pipeline = jbg.BatchIterDataset(
        grain.MapDataset.source(view).to_iter_dataset(), planner, window=16, aligned=ALIGNED
    )
    reference = jbg.BatchIterDataset(
        grain.MapDataset.source([examples[i] for i in index]).to_iter_dataset(),
        planner,
        window=16,
        aligned=ALIGNED,
    )
    for g, w in zip(list(pipeline), list(reference), strict=True):
        for key in w:
            np.testing.assert_array_equal(g[key], w[key], err_msg=key)


def test_a_state_or_job_over_one_view_is_refused_on_another(tmp_path):
    # Every example has length 4, so both views have equal lengths: only the
    # view's key tells them apart.
    ds = build(make_examples([4] * 12))
    first, second = ds[:6], ds[6:]
    assert _core.dataset_fingerprint(first._core) != _core.dataset_fingerprint(second._core)
    loader = jb.Loader(first, jb.PadToMax(batch_size=2), shuffle=False)
    next(loader)
    state = loader.get_state()
    with pytest.raises(ValueError, match="other data"):
        jb.Loader(second, jb.PadToMax(batch_size=2), shuffle=False, state=state)
    out = tmp_path / "job"
    jb.run(summarise, first, out, batch_size=3, progress=False)
    with pytest.raises(jb.JobError, match="input"):
        jb.run(summarise, second, out, batch_size=3, progress=False)
    got = jb.read_output(out)
    for i, example in enumerate(first[k] for k in range(len(first))):
        want = summarise_reference(example["tokens"])
        np.testing.assert_allclose(got["total"][i], want["total"], rtol=1e-6)


def test_map_over_a_view():
    examples = make_examples([5, 2, 8, 3, 6])
    view = build(examples)[[4, 1, 3]]
    result = jb.map(summarise, view, batch_size=2)
    for i, k in enumerate([4, 1, 3]):
        want = summarise_reference(examples[k]["tokens"])
        np.testing.assert_allclose(result.outputs[i]["total"], want["total"], rtol=1e-6)


def test_views_pickle_as_their_recipe(tmp_path):
    examples = make_examples([3, 1, 4, 1, 5, 9])
    ds = build(examples)
    views = [
        ds.select([5, 0, 0]),
        ds[1:5].filter(np.array([True, False, True, True])),
        jb.Dataset.concat([ds[:2], ds[4:]]),
        ds.shard(1, 2),
    ]
    for view in views:
        again = pickle.loads(pickle.dumps(view))
        assert_holds(again, [view[i] for i in range(len(view))])
        assert _core.dataset_fingerprint(again._core) == _core.dataset_fingerprint(view._core)
    # A view of a file pickles as the file's recipe plus the view's.
    pa_table = pa.table({"tokens": pa.array([e["tokens"] for e in examples])})
    path = tmp_path / "data.arrow"
    with pa.ipc.new_file(path, pa_table.schema) as writer:
        writer.write_table(pa_table)
    from jaxbatch._src.data.sources import open_path

    file_view = open_path(path, None, None, None)[::2]
    assert file_view._mapped_files == (str(path),)
    again = pickle.loads(pickle.dumps(file_view))
    np.testing.assert_array_equal(again.lengths(), [3, 4, 5])


def test_examples_as_dicts_or_a_generator_are_a_source():
    records = [{"tokens": np.arange(n, dtype=np.int32), "y": n % 2} for n in (3, 1, 2)]
    want = [b["tokens"] for b in jb.Loader(build_simple(records), jb.PadToMax(2), shuffle=False)]
    for source in (records, (r for r in records)):
        got = [b["tokens"] for b in jb.Loader(source, jb.PadToMax(2), shuffle=False)]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    ds = jb.Dataset.from_examples(records)
    assert ds.column_names == ["tokens", "y"]
    assert ds._core.column("y").is_fixed
    emb = jb.Dataset.from_examples([{"t": [1, 2], "e": [0.5, 1.5]}] * 2, fixed=["e"])
    assert emb._core.column("e").is_fixed and emb[1]["e"].shape == (2,)
    with pytest.raises(ValueError, match="example 1 lacks key 'y'"):
        jb.Dataset.from_examples([{"t": [1], "y": 1}, {"t": [2]}])
    with pytest.raises(ValueError, match="Dataset.from_examples: no examples"):
        jb.Dataset.from_examples([])


def build_simple(records) -> jb.Dataset:
    return jb.Dataset.from_arrays(
        {"tokens": [r["tokens"] for r in records], "y": np.array([r["y"] for r in records])}
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: jb.Dataset.from_arrays({"text": ["a cat", "a dog"]}),
        lambda: jb.Dataset.from_examples([{"text": "a cat"}, {"text": "a dog"}]),
        lambda: jb.Dataset.from_arrow(pa.table({"text": ["a cat", "a dog"]})),
        lambda: jb.Loader([{"text": "a cat"}], jb.PadToMax(1)),
    ],
)
def test_text_is_refused_pointing_to_tokenizing(make):
    pointer = r"column 'text'.*holds text.*tokenize the text into token ids first: jb\.tokenize\("
    with pytest.raises(ValueError, match=pointer):
        make()

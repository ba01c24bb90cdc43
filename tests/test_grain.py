"""jaxbatch.grain: planned batches inside Grain pipelines, equal to
jb.collate over each window; resumed through Grain's get_state/set_state
and grain.checkpoint with Orbax; a Loader as a Grain iterator; and the
pickles (Dataset, BatchPlan, planners) Grain's mp_prefetch workers need."""

from __future__ import annotations

import importlib
import json
import pickle
import sys

import grain
import numpy as np
import orbax.checkpoint as ocp
import pyarrow as pa
import pytest
from absl import flags
from etils import epath
from grain._src.core import sharding as grain_sharding
from hypothesis import given
from hypothesis import strategies as st
from test_elastic import check_rest, record

import jaxbatch as jb
import jaxbatch.grain as jbg
from jaxbatch._src.data.sources import open_path

PLANNERS = [
    jb.PadToMax(batch_size=3),
    jb.PadToMax(batch_size=4, pad_to_multiple=8, remainder="drop"),
    jb.FixedBuckets([4, 8, 16, 32], token_budget=48),
    jb.AutoBuckets(max_shapes=2, batch_size=3),
    jb.AutoBuckets(max_shapes=3, token_budget=40),
    jb.Pack(row_length=32, rows_per_batch=2),
    jb.Pack(row_length=24, rows_per_batch=3, algorithm="first_fit", max_segments_per_row=8),
]


ALIGNED = [["tokens", "feats"]]  # Packing needs them aligned.


def examples(lengths, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Variable-length examples as a Grain source gives them: tokens, 2-D
    features aligned with them, and a scalar label."""
    rng = np.random.default_rng(seed)
    return [
        {
            "tokens": rng.integers(0, 1000, n).astype(np.int32),
            "feats": rng.standard_normal((n, 2)).astype(np.float32),
            "label": np.int64(i),
        }
        for i, n in enumerate(lengths)
    ]


def reference(exs, planner, window: int) -> list[jb.Batch]:
    """The batches by hand: each window of examples a Dataset, planned and
    collated by jb.plan and jb.collate."""
    out = []
    for start in range(0, len(exs), window):
        part = exs[start : start + window]
        data = jb.Dataset.from_arrays(
            {
                "tokens": [e["tokens"] for e in part],
                "feats": [e["feats"] for e in part],
                "label": np.array([e["label"] for e in part]),
            },
            aligned=ALIGNED,
        )
        out += [jb.collate(data, spec) for spec in jb.plan(data, planner)]
    return out


def assert_same_batches(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert sorted(g) == sorted(w)
        for key in w:
            assert g[key].dtype == w[key].dtype, key
            np.testing.assert_array_equal(g[key], w[key], err_msg=key)
        if getattr(g, "shape", None) is not None:  # A Batch, not a dict Grain rebuilt.
            assert (g.shape, g.packed) == (w.shape, w.packed)


def batched(exs, planner, window: int) -> jbg.BatchIterDataset:
    return jbg.BatchIterDataset(
        grain.MapDataset.source(exs), planner, window=window, aligned=ALIGNED
    )


def test_without_grain_the_import_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] == "grain"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "grain", None)
    for name in ("jaxbatch.grain", "jaxbatch._src.integrations.grain"):
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError, match=r"jaxbatch.grain needs grain.*jaxbatch\[grain\]"):
        importlib.import_module("jaxbatch.grain")


# -- equal to jb.collate ------------------------------------------------------------


@pytest.mark.parametrize("planner", PLANNERS, ids=lambda p: p.key[:40])
def test_batches_equal_collate_over_each_window(planner):
    exs = examples(np.random.default_rng(1).integers(1, 25, 70))
    assert_same_batches(list(batched(exs, planner, window=16)), reference(exs, planner, 16))


@given(
    st.lists(st.integers(1, 24), min_size=1, max_size=60),
    st.integers(1, 25),
    st.sampled_from(PLANNERS),
)
def test_random_lengths_and_windows_equal_collate(lengths, window, planner):
    exs = examples(lengths)
    assert_same_batches(list(batched(exs, planner, window)), reference(exs, planner, window))


def test_an_iter_dataset_parent_and_a_map_after_it():
    exs = examples([3, 9, 1, 4, 7, 2, 8])
    planner = jb.PadToMax(batch_size=2)
    parent = grain.MapDataset.source(exs).to_iter_dataset()
    ds = jbg.BatchIterDataset(parent, planner, window=4, aligned=ALIGNED)
    want = reference(exs, planner, 4)
    assert [int(b["tokens_lengths"].sum()) for b in ds.map(lambda b: b)] == [
        int(b["tokens_lengths"].sum()) for b in want
    ]
    assert_same_batches(list(ds), want)


def test_bad_input_is_named():
    def plain(exs, planner, window):
        return jbg.BatchIterDataset(grain.MapDataset.source(exs), planner, window=window)

    with pytest.raises(TypeError, match="expected a grain.MapDataset or grain.IterDataset"):
        jbg.BatchIterDataset([{"tokens": np.arange(3)}], jb.PadToMax(2), window=4)
    with pytest.raises(ValueError, match="window must be a positive int"):
        jbg.BatchIterDataset(grain.MapDataset.source([]), jb.PadToMax(2), window=0)
    with pytest.raises(TypeError, match="expected a sequence planner"):
        jbg.BatchIterDataset(
            grain.MapDataset.source([]), jb.GraphBudget(nodes=8, edges=8, graphs=3), window=4
        )
    exs = [{"tokens": np.arange(3)}, {"tokens": np.arange(2)}, {"other": np.arange(2)}]
    with pytest.raises(ValueError, match="example 2 lacks key 'tokens'"):
        list(plain(exs, jb.PadToMax(2), window=4))
    exs = [{"tokens": np.arange(3)}] * 5 + [{"tokens": np.arange(3)}, {"tokens": np.int32(1)}]
    with pytest.raises(ValueError, match=r"key 'tokens' is a scalar .*example 6 differs"):
        list(plain(exs, jb.PadToMax(2), window=4))
    exs = [{"tokens": np.arange(40)}]
    with pytest.raises(ValueError, match="examples 0 to 0: Pack: example 0 has length 40"):
        list(plain(exs, jb.Pack(row_length=8, rows_per_batch=1), window=4))


# -- checkpoint and resume --------------------------------------------------------


@pytest.mark.parametrize("planner", PLANNERS[::2], ids=lambda p: p.key[:40])
def test_get_state_set_state_resumes_every_position(planner):
    exs = examples(np.random.default_rng(2).integers(1, 25, 45))
    ds = batched(exs, planner, window=10)
    want = list(ds)
    it = iter(ds)
    for k in range(len(want) + 1):
        state = json.loads(json.dumps(it.get_state()))  # JSON, as Grain's handler stores it
        resumed = iter(ds)
        resumed.set_state(state)
        assert_same_batches(list(resumed), want[k:])
        if k < len(want):
            next(it)


def test_state_of_another_pipeline_is_refused():
    exs = examples([3, 9, 1, 4, 7])
    it = iter(batched(exs, jb.PadToMax(2), window=4))
    next(it)
    other = iter(batched(exs, jb.PadToMax(3), window=4))
    with pytest.raises(ValueError, match="the state is of planner"):
        other.set_state(it.get_state())
    with pytest.raises(ValueError, match="expected a state from get_state"):
        other.set_state({"next_index": 3})


def test_a_state_of_a_pipeline_over_other_data_is_refused():
    planner = jb.PadToMax(2)
    exs = examples([3, 9, 1, 4, 7, 2, 5, 8])
    other = examples([3, 9, 1, 4, 7, 2, 5, 6], seed=1)  # Example 7 differs in length only.
    it = iter(batched(exs, planner, window=4))
    states = []
    for _ in range(len(list(batched(exs, planner, window=4)))):
        next(it)
        states.append(json.loads(json.dumps(it.get_state())))
    # 2 batches a window: states[1] is the end of window 1, the rest in window 2.
    for state in states[2:]:
        assert state["position"] == 4 and len(state["fingerprint"]) == 16
        foreign = iter(batched(other, planner, window=4))
        foreign.set_state(state)
        with pytest.raises(ValueError) as error:
            next(foreign)
        message = str(error.value)
        assert "the state was saved over other data: its window from example 4" in message
        assert f"layout fingerprint {state['fingerprint']!r}, this pipeline's has '" in message
    # The first window is the same data: its states restore into either.
    for k in (0, 1):
        resumed = iter(batched(other, planner, window=4))
        resumed.set_state(states[k])
        assert_same_batches([next(resumed)], [list(batched(other, planner, window=4))[k + 1]])
    # A state saved before the fingerprint was kept has none: it is not checked.
    legacy = {k: v for k, v in states[-1].items() if k != "fingerprint"}
    resumed = iter(batched(exs, planner, window=4))
    resumed.set_state(legacy)
    assert list(resumed) == []
    with pytest.raises(ValueError, match="fingerprint must be 16 hex digits or None, found 7"):
        iter(batched(exs, planner, window=4)).set_state(dict(states[0], fingerprint=7))


def test_a_window_with_other_keys_or_dtypes_than_the_last_is_named():
    def plain(exs):
        return jbg.BatchIterDataset(grain.MapDataset.source(exs), jb.PadToMax(2), window=2)

    base = [{"tokens": np.arange(3, dtype=np.int32), "y": np.float32(1)}] * 2
    wider = [{"tokens": np.arange(3, dtype=np.int64), "y": np.float32(1)}] * 2
    with pytest.raises(ValueError) as error:
        list(plain(base + wider))
    assert str(error.value).startswith(
        "BatchIterDataset: key 'tokens' in the window from example 2: expected dtype int32, as "
        "in the window before, found dtype int64"
    )
    fewer = [{"tokens": np.arange(3, dtype=np.int32)}] * 2
    with pytest.raises(ValueError, match="key 'y' in the window from example 2: expected dtype "
                       "float32, as in the window before, found no such key"):  # fmt: skip
        list(plain(base + fewer))
    more = [dict(e, z=np.arange(2)) for e in base]
    with pytest.raises(ValueError, match="key 'z' in the window from example 4: expected no such "
                       "key, as in the window before, found dtype int64"):  # fmt: skip
        list(plain(base + base + more))
    # Within a window, a key example 0 lacks is named, not dropped.
    with pytest.raises(ValueError, match="example 1 has key 'z', which example 0 lacks"):
        list(plain([base[0], more[0]]))


def test_grain_checkpoint_with_an_orbax_manager(tmp_path):
    exs = examples(np.random.default_rng(3).integers(1, 25, 60))
    ds = batched(exs, jb.Pack(row_length=32, rows_per_batch=2), window=12).map(dict)
    want = list(ds)
    it = iter(ds)
    for _ in range(5):
        next(it)
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(5, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(it)))
        manager.wait_until_finished()
    resumed = iter(ds)
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        manager.restore(
            5, args=ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(resumed))
        )
    assert_same_batches([jb.Batch(b) for b in resumed], [jb.Batch(b) for b in want[5:]])


# -- a Loader as a Grain iterator ---------------------------------------------------


def loader_data() -> jb.Dataset:
    rng = np.random.default_rng(4)
    return jb.Dataset.from_arrays({"tokens": [np.arange(n) for n in rng.integers(1, 30, 80)]})


def test_loader_iterator_under_grains_checkpoint_handler(tmp_path):
    data, planner = loader_data(), jb.AutoBuckets(max_shapes=3, batch_size=4)
    want = list(jb.Loader(data, planner, seed=7, shuffle=True))
    it = jbg.LoaderIterator(jb.Loader(data, planner, seed=7, shuffle=True))
    assert isinstance(it, grain.DatasetIterator)
    for _ in range(6):
        next(it)
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(6, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(it)))
        manager.wait_until_finished()
    it.close()
    resumed = jbg.LoaderIterator(jb.Loader(data, planner, seed=7, shuffle=True))
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        manager.restore(
            6, args=ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(resumed))
        )
    assert_same_batches(list(resumed), want[6:])


@pytest.mark.parametrize(("n", "m", "step"), [(4, 3, 5), (2, 3, 0), (3, 1, 4)])
def test_a_grain_checkpoint_of_n_processes_restores_elastically_on_m(
    tmp_path, monkeypatch, n, m, step
):
    """Grain's own handler saves n processes' LoaderIterators (one file
    each, as n hosts write them into the step's folder); m processes
    restore through an Orbax manager with jbg.CheckpointRestore(elastic=True):
    the n's batches before plus the m's after are the uninterrupted stream."""
    data, planner = loader_data(), jb.Pack(24, 2, too_long="split")

    def make(shard):
        return jb.Loader(data, planner, shard=shard, seed=3, shuffle=True, epochs=2)

    def as_process(i, count):
        monkeypatch.setattr(grain_sharding, "get_process_index_and_count", lambda: (i, count))

    full = []
    for i in range(n):
        with make((i, n)) as loader:
            full.append(record(loader))
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        for i in range(n):
            with make((i, n)) as loader:
                it = jbg.LoaderIterator(loader)
                record(it, limit=step) if step else None
                as_process(i, n)
                if i == 0:  # The first host makes the step's folder; the others add their file.
                    # Grain's save args or jaxbatch's: the same files.
                    saving = grain.checkpoint.CheckpointSave if n % 2 == 0 else jbg.CheckpointSave
                    manager.save(step, args=ocp.args.Composite(data=saving(it)))
                    manager.wait_until_finished()
                else:
                    grain.checkpoint.CheckpointHandler().save(
                        epath.Path(tmp_path / "ckpt" / str(step) / "data"),
                        args=grain.checkpoint.CheckpointSave(it),
                    )
    rest = []
    for j in range(m):
        as_process(j, m)
        with make((j, m)) as loader:
            it = jbg.LoaderIterator(loader)
            with ocp.CheckpointManager(tmp_path / "ckpt") as manager:  # Grain's: its own file.
                grains = ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(it))
                with pytest.raises(ValueError, match=f"process_{j}-of-{m}.json does not exist"):
                    manager.restore(step, args=grains)
            with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
                args = ocp.args.Composite(data=jbg.CheckpointRestore(it, elastic=True))
                assert manager.restore(step, args=args).data is it
            rest.append(record(it))
    check_rest(full, rest, step)


def test_grain_elastic_restore_names_missing_states_and_wrong_items(tmp_path, monkeypatch):
    folder = epath.Path(tmp_path)
    with jb.Loader(loader_data(), jb.PadToMax(batch_size=4), shard=(1, 2)) as loader:
        monkeypatch.setattr(grain_sharding, "get_process_index_and_count", lambda: (1, 2))
        grain.checkpoint.CheckpointHandler().save(
            folder, args=grain.checkpoint.CheckpointSave(jbg.LoaderIterator(loader))
        )
        restore = jbg.CheckpointRestore(jbg.LoaderIterator(loader), elastic=True)
        with pytest.raises(
            FileNotFoundError, match=r"lacks the states of process\(es\) \[0\] of 2"
        ):
            jbg.CheckpointHandler().restore(folder, args=restore)
    with pytest.raises(TypeError, match="elastic=True restores a jaxbatch.grain.LoaderIterator"):
        jbg.CheckpointRestore(iter(grain.MapDataset.range(3).to_iter_dataset()), elastic=True)


def test_loader_iter_dataset_under_grains_map():
    data, planner = loader_data(), jb.PadToMax(batch_size=8)
    want = [int(b["tokens_lengths"].sum()) for b in jb.Loader(data, planner)]
    ds = jbg.LoaderIterDataset(jb.Loader(data, planner)).map(
        lambda b: int(b["tokens_lengths"].sum())
    )
    it = iter(ds)
    first = [next(it) for _ in range(3)]
    state = json.loads(json.dumps(it.get_state()))  # The Loader's, under Grain's map.
    rest = list(it)
    assert first + rest == want
    again = iter(
        jbg.LoaderIterDataset(jb.Loader(data, planner)).map(
            lambda b: int(b["tokens_lengths"].sum())
        )
    )
    again.set_state(state)
    assert list(again) == rest
    with pytest.raises(TypeError, match="cannot be sent to another process"):
        pickle.dumps(jbg.LoaderIterDataset(jb.Loader(data, planner)))
    for wrap in (jbg.LoaderIterator, jbg.LoaderIterDataset):
        with pytest.raises(TypeError, match=wrap.__name__ + r": expected a jb.Loader .* list"):
            wrap([1, 2])


def test_loader_read_ahead_by_device_prefetch_is_refused():
    loader = jb.Loader(loader_data(), jb.PadToMax(batch_size=8))
    batches = jb.device_prefetch(loader)
    next(batches)
    with pytest.raises(ValueError, match="wrap that iterator instead"):
        jbg.LoaderIterator(loader).get_state()
    with pytest.raises(ValueError, match="would come before the restored stream; wrap that"):
        jbg.LoaderIterator(loader).set_state(batches.get_state())
    it = jbg.LoaderIterator(batches)
    state = it.get_state()
    after = next(it)
    it.set_state(state)
    np.testing.assert_array_equal(next(it)["tokens"], after["tokens"])
    loader.close()


# -- pickles ------------------------------------------------------------------------


def test_dataset_plan_and_planners_pickle():
    data = jb.Dataset.from_arrays(
        {
            "tokens": [np.arange(n, dtype=np.int16) for n in (5, 0, 9, 2, 7)],
            "feats": [np.ones((n, 3), np.float32) * n for n in (5, 0, 9, 2, 7)],
            "label": np.arange(5),
        },
        aligned=[["tokens", "feats"]],
    )
    back = pickle.loads(pickle.dumps(data))
    assert repr(back) == repr(data)
    assert back._core.aligned_groups == data._core.aligned_groups
    for planner in PLANNERS:
        assert pickle.loads(pickle.dumps(planner)) == planner
        p = jb.plan(data, planner)
        q = pickle.loads(pickle.dumps(p))
        assert (q.planner, q.stats, q.shapes, len(q)) == (p.planner, p.stats, p.shapes, len(p))
        for a, b in zip(p, q, strict=True):
            assert [list(r) for r in a.rows] == [list(r) for r in b.rows]
            assert_same_batches([jb.collate(back, b)], [jb.collate(data, a)])


def test_an_unpickled_plan_is_checked_by_the_engine():
    plan = jb.plan(jb.Dataset.from_arrays({"t": [np.arange(3)] * 4}), jb.PadToMax(2))
    state = list(plan._core.__getstate__())
    state[7] = state[7][::-1].copy()  # row_example_begin, reversed
    broken = type(plan._core).__new__(type(plan._core))  # as pickle makes it
    with pytest.raises(ValueError, match="row_example_begin must start at 0"):
        broken.__setstate__(tuple(state))


def test_a_gathered_huggingface_style_column_pickles_as_values():
    table = pa.Table.from_batches(
        [pa.record_batch({"t": pa.array([[1, 2], [3]])}), pa.record_batch({"t": [[4, 5, 6]]})]
    )
    data = jb.Dataset.from_arrow(table)
    back = pickle.loads(pickle.dumps(data))
    assert [back.example(i)["t"].tolist() for i in range(3)] == [[1, 2], [3], [4, 5, 6]]


def test_a_file_backed_dataset_pickles_as_its_path(tmp_path):
    path = tmp_path / "data.arrow"
    table = pa.table(
        {"t": pa.array([list(range(n)) for n in range(1, 2000)], pa.list_(pa.int32()))}
    )
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write(table)
    data = open_path(path, None, None, None)
    blob = pickle.dumps(data)
    assert len(blob) < 2000  # the path, not the values
    back = pickle.loads(blob)
    assert back._mapped_files == (str(path),)
    assert back.example(1500)["t"].tolist() == list(range(1501))
    loader_dataset = jb.Loader(path, jb.PadToMax(4)).dataset  # how users get one
    assert len(pickle.dumps(loader_dataset)) < 2000
    path.write_bytes(path.read_bytes() + b"\0")  # changed since it was read
    with pytest.raises(OSError, match="which changed since it was read"):
        pickle.loads(blob)


def test_a_huggingface_dataset_pickles_as_its_files(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    hf = datasets.Dataset.from_dict({"t": [list(range(n)) for n in range(1, 1500)]})
    hf.save_to_disk(str(tmp_path / "hf"))
    hf = datasets.load_from_disk(str(tmp_path / "hf")).shuffle(seed=0)  # an indices mapping
    data = jb.Dataset.from_huggingface(hf)
    blob = pickle.dumps(data)
    assert len(blob) < 20_000  # datasets pickles its memory-mapped files as paths
    back = pickle.loads(blob)
    for i in (0, 7, 1498):
        assert back.example(i)["t"].tolist() == hf[i]["t"]
    assert back._mapped_files == data._mapped_files


# -- Grain's mp_prefetch workers ----------------------------------------------------


class DatasetSource:
    """A Grain data source over a jb.Dataset (pickled to each worker)."""

    def __init__(self, data: jb.Dataset):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        return {k: np.array(v) for k, v in self.data.example(int(i)).items()}


@pytest.mark.timeout(60)
def test_mp_prefetch_with_two_workers():
    if not flags.FLAGS.is_parsed():  # Grain's workers read absl flags.
        flags.FLAGS.mark_as_parsed()
    data = loader_data()
    planner = jb.FixedBuckets([8, 16, 32], batch_size=4)
    source = grain.MapDataset.source(DatasetSource(data))
    ds = jbg.BatchIterDataset(source, planner, window=8)
    it = iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    try:
        got = list(it)
    finally:
        it.close()
    # Each worker batches its slice of the source (every second example);
    # Grain takes their batches in turn.
    per_worker = [list(jbg.BatchIterDataset(source[w::2], planner, window=8)) for w in (0, 1)]
    want = [b for pair in zip(*per_worker, strict=True) for b in pair]
    assert_same_batches([jb.Batch(b) for b in got], want)

"""The processes' agreement (jaxbatch._src.load.agree) in one process: how differences
are found and named for many processes, and that a single process does nothing
extra. tests/test_multihost.py runs it across real jax.distributed processes."""

import numpy as np
import pytest

import jaxbatch as jb
from jaxbatch._src.load import agree as _agree


def test_differences_group_processes_by_value_in_order():
    settings = [{"seed": "3", "epochs": "2"}] * 3 + [{"seed": "4", "epochs": "2"}]
    settings += [{"seed": "3", "epochs": "2", "extra": "x"}]
    assert _agree.differences(settings) == [
        ("seed", [("3", [0, 1, 2, 4]), ("4", [3])]),
        ("extra", [("nothing", [0, 1, 2, 3]), ("x", [4])]),
    ]
    assert _agree.differences([{"seed": "3"}] * 4) == []


def test_mismatch_message_names_each_difference_and_its_processes():
    settings = [{"seed": "3", "planner": "A"}] * 3 + [{"seed": "4", "planner": "B"}]
    message = _agree.mismatch_message("Loader(shard='jax')", _agree.differences(settings))
    assert message.startswith(
        "Loader(shard='jax'): the processes were given different seed: processes 0-2 have 3, "
        "process 3 has 4; different planner: processes 0-2 have A, process 3 has B. "
    )


def test_messages_stay_short_on_many_processes():
    # 1000 processes, each with its own seed, and every other one with a planner of its own.
    settings = [{"seed": str(p), "planner": "A" if p % 2 else "B"} for p in range(1000)]
    message = _agree.mismatch_message("global_batches", _agree.differences(settings))
    assert "processes 1, 3, 5, 7, 9, 11, 13, 15 and 492 more have A" in message
    assert "process 3 has 3, 996 other values elsewhere" in message
    assert len(message) < 600


def test_shard_problem_names_shards_loaded_twice_and_none():
    assert _agree.shard_problem([1, 0, 2], 3) is None
    assert _agree.shard_problem([0, 0, 2, 2], 4) == (
        "processes 0-1 have shard 0; processes 2-3 have shard 2, so no process loads shard 1 "
        "(nor 1 others)"
    )
    assert _agree.shard_problem([0, 1], 4) == (
        "every Loader has shard=(index, 4) but there are 2 processes"
    )


def test_timeout_message_names_the_missing_processes():
    message = _agree.timeout_message("loader", "Loader(shard='jax')", [1, 2, 5], 8, 2, 300.0)
    assert message.startswith(
        "Loader(shard='jax'): processes 1-2, 5 of 8 did not reach its shard='jax' Loader "
        "number 3 within 300 s"
    )


@pytest.mark.parametrize("text", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_timeout_in_the_environment_is_refused(monkeypatch, text):
    monkeypatch.setenv(_agree.TIMEOUT_ENV, text)
    with pytest.raises(ValueError, match=f"{_agree.TIMEOUT_ENV} must be a finite number"):
        _agree._timeout_s()


def test_one_process_agrees_with_itself_without_a_round():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n) for n in (3, 5, 2, 7)]})
    before = dict(_agree._rounds)
    with jb.Loader(ds, jb.PadToMax(2), shard="jax", shuffle=False) as loader:
        batches = list(jb.global_batches(loader))
    assert [b["example_index"].tolist() for b in batches] == [[0, 1], [2, 3]]
    assert dict(_agree._rounds) == before
    # One shard of many still feeds one process's global batches (a local test of a shard).
    with jb.Loader(ds, jb.PadToMax(2), shard=(1, 2), shuffle=False) as loader:
        expected = [b["example_index"].tolist() for b in loader]
    with jb.Loader(ds, jb.PadToMax(2), shard=(1, 2), shuffle=False) as loader:
        got = [b["example_index"].tolist() for b in jb.global_batches(loader)]
    assert got == expected and len(got) == 2


def test_loader_settings_differ_in_what_was_changed_and_nothing_else():
    tokens = [np.arange(n, dtype=np.float32) for n in (3, 5, 2, 7)]
    ds = jb.Dataset.from_arrays({"tokens": tokens, "other": [t[:2] for t in tokens]})
    base = dict(source=ds, planner=jb.PadToMax(2), seed=3)
    changes = {
        "data": dict(source=jb.Dataset.from_arrays({"tokens": tokens, "other": tokens})),
        "length column": dict(column="other"),
        "planner": dict(planner=jb.PadToMax(3)),
        "seed": dict(seed=4),
        "shuffle": dict(shuffle="block"),
        "block_size": dict(block_size=2),
        "epochs": dict(epochs=None),
        "shard count": dict(shard=(0, 2)),
        "bad records": dict(schema={"tokens": jb.ColumnSchema(max_length=9, finite=True)}),
    }

    def settings(**args):
        with jb.Loader(**args) as loader:
            return _agree.loader_settings(loader)

    reference = settings(**base)
    for name, change in changes.items():
        diffs = _agree.differences([reference, settings(**dict(base, **change))])
        assert [d[0] for d in diffs] == [name], (name, diffs)

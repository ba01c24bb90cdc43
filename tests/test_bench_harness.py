"""bench/harness.py: the noise-control logic, checked without timing anything."""

import argparse
import json
import statistics
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import harness  # noqa: E402


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=30))
def test_summary_is_median_with_min_max(values):
    s = harness.summary(values)
    assert s == {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }
    assert s["min"] <= s["median"] <= s["max"]


def test_summary_of_even_count_averages_the_middle_two():
    assert harness.summary([4.0, 1.0, 3.0, 100.0])["median"] == 3.5


def test_summary_refuses_no_values():
    with pytest.raises(ValueError, match="no values"):
        harness.summary([])


def test_spread_text():
    assert harness.spread([3.0, 1.0, 2.0], ".1f") == "2.0 (1.0-3.0)"


def test_order_alternates_contenders_within_each_repetition():
    assert harness.order(["a", "b", "c"], 2) == [
        (0, "a"),
        (0, "b"),
        (0, "c"),
        (1, "a"),
        (1, "b"),
        (1, "c"),
    ]


@pytest.mark.parametrize("names, reps", [(["a", "a"], 2), (["a"], 0)])
def test_order_refuses_bad_input(names, reps):
    with pytest.raises(ValueError):
        harness.order(names, reps)


def test_alternate_calls_in_alternating_order_and_groups_results():
    calls = []

    def contender(name):
        def run():
            calls.append(name)
            return {"call": len(calls)}

        return run

    seen = []
    runs = harness.alternate(
        {"x": contender("x"), "y": contender("y")},
        3,
        progress=lambda rep, name, r: seen.append((rep, name, r["call"])),
    )
    assert calls == ["x", "y"] * 3
    assert runs == {
        "x": [{"call": 1}, {"call": 3}, {"call": 5}],
        "y": [{"call": 2}, {"call": 4}, {"call": 6}],
    }
    assert seen == [(0, "x", 1), (0, "y", 2), (1, "x", 3), (1, "y", 4), (2, "x", 5), (2, "y", 6)]


def test_load_above_the_cores_is_refused():
    with pytest.raises(harness.LoadTooHigh, match=r"load average 2\.50 is above the 2 cores"):
        harness.check_load(False, load=2.5, cores=2)


def test_load_above_the_cores_runs_with_force_and_is_recorded():
    env = harness.check_load(True, load=2.5, cores=2)
    assert (env["load_average"], env["cores"], env["forced"]) == (2.5, 2, True)


@pytest.mark.parametrize("load", [0.0, 1.9, 2.0])
def test_load_at_or_below_the_cores_runs(load):
    env = harness.check_load(False, load=load, cores=2)
    assert (env["load_average"], env["forced"]) == (load, False)


def test_check_load_reads_the_machine_by_default():
    env = harness.check_load(True)
    assert env["cores"] >= 1 and env["load_average"] >= 0


def _parse(argv, **kwargs):
    p = argparse.ArgumentParser()
    harness.add_arguments(p, **kwargs)
    return p.parse_args(argv)


@pytest.mark.parametrize(
    "argv, kwargs, reps",
    [
        ([], {}, harness.DEFAULT_REPS),
        (["--quick"], {}, harness.QUICK_REPS),
        (["--reps", "7"], {}, 7),
        (["--quick", "--reps", "1"], {}, 1),
        ([], {"default_reps": 3}, harness.MIN_REPS),
        ([], {"default_reps": 9}, 9),
    ],
)
def test_repetitions(argv, kwargs, reps):
    assert harness.repetitions(_parse(argv, **kwargs)) == reps


def test_repetitions_refuses_zero():
    with pytest.raises(ValueError, match="--reps"):
        harness.repetitions(_parse(["--reps", "0"]))


def test_format_table_aligns_columns_under_a_rule():
    text = harness.format_table([("way", "s"), ("naive", "12.5"), ("pack", "3")])
    assert text.splitlines() == ["way    s", "-----  ----", "naive  12.5", "pack   3"]


def test_write_json(tmp_path):
    path = harness.write_json("x", {"a": [1, 2]}, directory=tmp_path / "results")
    assert path == tmp_path / "results" / "x.json"
    assert json.loads(path.read_text()) == {"a": [1, 2]}


def test_the_machine_is_named_with_its_load():
    env = harness.check_load(True, load=2.5, cores=2)
    assert env["cpu"] and env["cpu"] == harness.cpu_model()
    forced = f"{env['cpu']}, 2 cores, load average 2.50 (forced: above the core count)"
    assert harness.describe(env) == forced
    quiet = harness.check_load(False, load=0.5, cores=2)
    assert harness.describe(quiet).endswith(", 2 cores, load average 0.50")

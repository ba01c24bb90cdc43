"""The benchmarks' baselines run their own code: every hand-written way of
bench_e2e (naive, expert), bench_train (naive, pad64, padmax, hand_buckets)
and bench_images (resize, pad), and bench_execute's choice of lax.map's
batch_size, runs in a fresh process in which importing jaxbatch fails, on
data this process made, and gives what a reference says: bench_e2e's loops
sentence-transformers' stored embeddings, bench_train's and bench_images'
steps the loss of the jaxbatch ways' model code on the same batch,
bench_images' padded batches jb.PadToMax's, bench_execute's chunk XLA's
memory analysis of the program it picks. Their own modules' imports are
checked too: only the corpus may come from jaxbatch."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
import bench_images  # noqa: E402
import bench_train  # noqa: E402
import image_data  # noqa: E402

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.npz"
# Fresh processes compile their models with XLA's backend optimisations off:
# a third less compile time, outputs within 2e-7 (tests/test_minilm.py).
FAST_COMPILE = "--xla_backend_optimization_level=0"

WITHOUT_JAXBATCH = """
import importlib.abc, sys
class NoJaxbatch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "jaxbatch" or name.startswith("jaxbatch."):
            raise ImportError("a baseline imported " + name)
sys.meta_path.insert(0, NoJaxbatch())
sys.path.insert(0, BENCH)
"""


def run_without_jaxbatch(code: str, timeout: int = 300) -> str:
    """Runs `code` in a fresh Python in which importing jaxbatch raises
    ImportError (bench/ on its path); returns its stdout, failing the test
    with its stderr when it fails."""
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}"}
    program = WITHOUT_JAXBATCH.replace("BENCH", repr(str(BENCH))) + code
    program += "\nassert not [m for m in sys.modules if m.split('.')[0] == 'jaxbatch']\n"
    proc = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def jaxbatch_imports(path: Path) -> list[tuple[str, str]]:
    """(enclosing function, module) for each import of jaxbatch in `path`."""
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef) else where
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module:
                names = [child.module]
            found.extend((where, n) for n in names if n.split(".")[0] == "jaxbatch")
            visit(child, inner)

    visit(ast.parse(path.read_text()), "<module>")
    return found


def test_the_baseline_modules_import_nothing_of_jaxbatch_but_the_corpus():
    assert jaxbatch_imports(BENCH / "expert_attention.py") == []
    # expert_minilm's main() reads the demo's corpus (the data, nothing else).
    assert jaxbatch_imports(BENCH / "expert_minilm.py") == [
        ("main", "jaxbatch._src.data.default_data")
    ]
    assert all(
        where != "lax_map_chunk" for where, _ in jaxbatch_imports(BENCH / "bench_execute.py")
    )


@pytest.mark.timeout(300)
def test_bench_execute_lax_map_chunk_fits_xla_analysis_without_jaxbatch():
    """lax.map's batch_size, picked without jaxbatch at --quick's sizes:
    XLA's compiled memory analysis of jax.vmap at that many examples
    (temporaries and outputs) is within the budget, and at twice as many
    it is not (the chunk is not needlessly small)."""
    out = run_without_jaxbatch("""
import json, jax, jax.numpy as jnp, numpy as np, bench_execute
n, k, budget = bench_execute.sizes(quick=True)
points = jnp.asarray(np.random.default_rng(0).standard_normal((n, k, 3)), jnp.float32)
chunk = bench_execute.lax_map_chunk(points, budget)
def analysed(count):
    compiled = jax.jit(jax.vmap(bench_execute.pairwise_energy)).lower(points[:count]).compile()
    stats = compiled.memory_analysis()
    return stats.temp_size_in_bytes + stats.output_size_in_bytes
print(json.dumps([n, budget, chunk, analysed(chunk), analysed(min(n, 2 * chunk))]))
""")
    n, budget, chunk, at_chunk, at_twice = json.loads(out.strip().splitlines()[-1])
    assert 1 <= chunk < n
    assert at_chunk <= budget < at_twice


@pytest.mark.timeout(600)
def test_bench_e2e_loops_run_without_jaxbatch_and_match_sentence_transformers(tmp_path):
    data = np.load(REFERENCE)
    sentences, expected = [str(s) for s in data["sentences"]], data["embeddings"]
    (tmp_path / "sentences.json").write_text(json.dumps(sentences))
    run_without_jaxbatch(f"""
import json, numpy as np, expert_minilm
sentences = json.load(open({str(tmp_path / "sentences.json")!r}))
model = expert_minilm.Model.load()
ids = model.tokenize(sentences)
assert max(len(i) for i in ids) == 256  # truncated as the model is
expert, info = expert_minilm.expert_loop(model, ids, "bias")
naive, _ = expert_minilm.naive_loop(model, ids, "dot_product_attention")
np.save({str(tmp_path / "expert.npy")!r}, expert)
np.save({str(tmp_path / "naive.npy")!r}, naive)
""")
    for name in ("expert", "naive"):
        got = np.load(tmp_path / f"{name}.npy")
        assert got.shape == expected.shape, name
        cosines = (got * expected).sum(1) / np.linalg.norm(got, axis=1)
        assert cosines.min() >= 0.9999, (name, cosines.min())


def test_bench_train_steps_equal_across_the_two_attentions():
    """One step's loss on a padded batch: the baselines' attention (plain JAX)
    against the jaxbatch ways' (jb.masked) on the same rows."""
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 256, n).astype(np.int32) for n in (5, 32, 17)]
    tokens, segments = bench_train.pad_rows(rows, 32)
    batch = bench_train.with_positions(tokens, segments, np.arange(3))
    params = bench_train.init_params()
    inputs = (params, batch["tokens"], batch["positions"], batch["segments"])
    expert = bench_train.loss_terms(*inputs, expert=True)
    ours = bench_train.loss_terms(*inputs, expert=False)
    assert int(expert[1]) == int(ours[1]) > 0
    np.testing.assert_allclose(float(expert[0]), float(ours[0]), rtol=1e-5)


@pytest.mark.timeout(600)
def test_bench_train_baselines_run_without_jaxbatch(tmp_path):
    train_set, held = bench_train.split(bench_train.QUICK_TOKENS, bench_train.QUICK_EVAL_EXAMPLES)
    np.savez(tmp_path / "data.npz", *train_set, *held)
    out = run_without_jaxbatch(f"""
import json, numpy as np, adam, bench_train
data = np.load({str(tmp_path / "data.npz")!r})
arrays = [data[f"arr_{{i}}"] for i in range(len(data.files))]
train, held = arrays[:{len(train_set)}], arrays[{len(train_set)}:]
params = bench_train.init_params()
initial = (params, adam.init(params))
held_out = bench_train.HeldOut(held)
result = {{}}
for way in ("padmax", "hand_buckets"):
    r = bench_train.train(way, train, initial, held_out, bench_train.QUICK_COMPILER_OPTIONS)
    result[way] = [r["real_tokens"], r["held_out_loss"]]
for way in ("naive", "pad64"):  # batching only: their step is padmax's
    batches = bench_train.batches(way, train)
    result[way] = [sum(int(np.count_nonzero(b["segments"])) for b in batches), 0.0]
print(json.dumps(result))
""")
    result = json.loads(out.strip().splitlines()[-1])
    real = sum(len(e) for e in train_set)
    for way, (tokens, loss) in result.items():
        assert tokens == real, way
        assert np.isfinite(loss) and loss < np.log(bench_train.VOCAB), way


@pytest.fixture(scope="module")
def images():
    return image_data.examples(bench_images.QUICK_IMAGES, seed=0)


def test_bench_images_pad_baseline_is_pad_to_max(images):
    import jaxbatch as jb

    pictures, labels = images
    ds = bench_images.image_dataset(pictures)
    order = bench_images.shuffled(len(pictures), 1)
    plans = list(jb.plan(ds, jb.PadToMax(bench_images.BATCH), order=order))
    mine = list(bench_images.pad_batches(pictures, labels, 1))
    assert len(mine) == len(plans)
    for batch, spec in zip(mine, plans, strict=True):
        reference = jb.collate(ds, spec)
        np.testing.assert_array_equal(batch["images"], reference["image"])
        np.testing.assert_array_equal(batch["mask"], reference["image_mask"])
        np.testing.assert_array_equal(batch["index"], reference["example_index"])


def test_bench_images_baseline_loss_equals_the_jaxbatch_ways():
    rng = np.random.default_rng(0)
    pictures = [rng.integers(0, 256, (h, w, 3)).astype(np.uint8) for h, w in [(32, 48), (48, 16)]]
    batch = next(bench_images.pad_batches(pictures, np.array([3, 5]), 0))
    params = bench_images.init_params()
    inputs = (params, batch["images"], batch["mask"], batch["labels"])
    expert = bench_images.expert_grid_loss(*inputs)
    ours = bench_images.grid_loss(*inputs)
    assert int(expert[1]) == int(ours[1]) > 0
    np.testing.assert_allclose(float(expert[0]), float(ours[0]), rtol=1e-5)


@pytest.mark.timeout(600)
def test_bench_images_baselines_run_without_jaxbatch():
    out = run_without_jaxbatch("""
import json, numpy as np, adam, bench_images, image_data
images, labels = image_data.examples(8, seed=0)
params = bench_images.init_params()
initial = (params, adam.init(params))
result = {}
for way in bench_images.BASELINES:
    options = bench_images.QUICK_COMPILER_OPTIONS
    r = bench_images.train(way, images, labels, initial, options, steps=1)
    result[way] = [r["steps"], r["last_quarter_loss"]]
print(json.dumps(result))
""")
    result = json.loads(out.strip().splitlines()[-1])
    assert set(result) == set(bench_images.BASELINES)
    for way, (steps, loss) in result.items():
        assert steps == 1 and np.isfinite(loss), way

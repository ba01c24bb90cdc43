"""The demo's all-MiniLM-L6-v2 in JAX against the PyTorch reference.

tests/data/minilm_reference.npz holds 20 sentences and the embeddings
sentence-transformers 6.3.0 on torch 2.13.0 (CPU) gave for them, written
once by `bench/make_minilm_reference.py` in the bench environment:

    .venv-bench/bin/python bench/make_minilm_reference.py

so these tests need neither torch nor sentence-transformers. bench_e2e.py
compares against live sentence-transformers.
"""

from pathlib import Path

import numpy as np
import pytest

import jaxbatch as jb
from jaxbatch._src.cli.demo import minilm

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.npz"


@pytest.fixture(scope="module")
def model():
    return minilm.load_model()


@pytest.fixture(scope="module")
def reference():
    data = np.load(REFERENCE)
    return [str(s) for s in data["sentences"]], data["embeddings"]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def one_by_one(model, reference):
    """Each sentence embedded alone at its own length, unpadded (a
    compilation each, the weights an argument so each compiles faster:
    shared by the tests that compare against it). XLA's backend
    optimisations off cut the 20 compilations' time by a third; the
    embeddings move by under 2e-7, far inside every bound they are held to."""
    import jax

    embed = jax.jit(lambda params, example: model.embed_fn(params=params)(example))
    ids = model.tokenize(reference[0])
    rows = [{"input_ids": i, "input_ids_mask": np.ones(len(i), bool)} for i in ids]
    fast = {"xla_backend_optimization_level": 0}
    once = [embed.lower(model.params, row).compile(fast)(model.params, row) for row in rows]
    return np.stack([np.asarray(e) for e in once])


def test_every_sentence_matches_sentence_transformers(model, reference, one_by_one):
    sentences, expected = reference
    ids = model.tokenize(sentences)
    assert max(len(i) for i in ids) == 256  # The long paragraph is truncated as the model is.
    got = one_by_one
    assert got.shape == (20, 384)
    assert cosines(got, expected).min() >= 0.999
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)


def test_padded_bucketed_job_gives_the_unpadded_embeddings(model, reference, tmp_path):
    """Through jb.run (AutoBuckets, padding, masks): padding changes nothing."""
    sentences, expected = reference
    ds = jb.Dataset.from_arrays({"input_ids": model.tokenize(sentences)})
    jb.run(
        model.embed_fn(), ds, tmp_path, planner=jb.AutoBuckets(2, token_budget=1024), progress=False
    )
    out = jb.read_output(tmp_path)
    np.testing.assert_array_equal(out["example_index"], np.arange(20))
    assert cosines(out["output"], expected).min() >= 0.999


def test_packed_job_gives_the_unpacked_embeddings(model, reference, one_by_one, tmp_path):
    """Through jb.run with Pack: several sentences per row, block-diagonal
    attention, positions restarting per segment, per-segment mean pooling;
    the same embeddings as one sentence at a time, and as PyTorch's."""
    sentences, expected = reference
    ids = model.tokenize(sentences)
    ds = jb.Dataset.from_arrays({"input_ids": ids})
    pack = jb.Pack(row_length=256, rows_per_batch=4)
    segments = jb.plan(ds, pack).shapes[0].segments
    assert segments < 256
    jb.run(model.embed_packed_fn(segments), ds, tmp_path, planner=pack, progress=False)
    out = jb.read_output(tmp_path)
    np.testing.assert_array_equal(out["example_index"], np.arange(20))
    np.testing.assert_allclose(out["output"], one_by_one, atol=2e-5)
    assert cosines(out["output"], expected).min() >= 0.999


def test_bfloat16_model_stays_within_the_cosine_bound_of_the_reference(model, reference, tmp_path):
    """--dtype bfloat16: bfloat16 weights and matmuls, float32 layer norms,
    softmax and pooling; against PyTorch's float32 embeddings and this
    model's own float32 ones, cosine >= 0.999, through a padded job and a
    packed one."""
    import jax

    sentences, expected = reference
    bf16 = minilm.load_model(dtype="bfloat16")
    assert {str(leaf.dtype) for leaf in jax.tree.leaves(bf16.params)} == {"bfloat16"}
    ids = bf16.tokenize(sentences)
    ds = jb.Dataset.from_arrays({"input_ids": ids})
    pack = jb.Pack(row_length=256, rows_per_batch=4)
    fun = {
        "padded": (bf16.embed_fn(), jb.AutoBuckets(2, token_budget=1024)),
        "packed": (bf16.embed_packed_fn(jb.plan(ds, pack).shapes[0].segments), pack),
    }
    for name, (f, planner) in fun.items():
        jb.run(f, ds, tmp_path / name, planner=planner, progress=False)
        out = jb.read_output(tmp_path / name)["output"]
        assert out.dtype == np.float32
        assert cosines(out, expected).min() >= 0.999, name
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match=r"dtype must be one of \('float32', 'bfloat16'\)"):
        minilm.load_model(dtype="float16")


def test_tokenizer_matches_the_reference_ids(model):
    # [CLS] hello world [SEP], from the model's own vocab.txt.
    vocab = (model.folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
    ids = model.tokenize(["Hello world"])[0]
    assert [vocab[i] for i in ids] == ["[CLS]", "hello", "world", "[SEP]"]


@pytest.mark.parametrize(("planner", "dtype"), [("auto", "float32"), ("pack", "bfloat16")])
def test_demo_command_embeds_compares_and_searches(planner, dtype, tmp_path, capsys):
    """`jaxbatch demo` end to end on a small text file: the job, the naive
    loop (checked equal inside the command), the planner table and a query
    whose nearest line is the obvious one."""
    from jaxbatch._src.cli.main import main

    lines = [f"Paragraph {i} is about topic number {i} in the manual." for i in range(30)]
    lines[17] = "The cat sat on the mat and purred."
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n\n")
    out = tmp_path / "out"
    args = ["demo", "--corpus", str(corpus), "--output", str(out), "--max-shapes", "2"]
    args += ["--planner", planner, "--query", "a cat sitting on a mat", "--no-progress"]
    assert main([*args, "--dtype", dtype]) == 0
    text = capsys.readouterr().out
    checked = "same embeddings" if dtype == "float32" else "bfloat16 against float32"
    assert "30 texts" in text and checked in text and "AutoBuckets(max_shapes=2)" in text
    assert "1. [" in text and "#17: The cat sat on the mat" in text
    vectors = jb.read_output(out)["output"]
    assert vectors.shape == (30, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)

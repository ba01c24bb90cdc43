"""bench/bench_e2e.py's bookkeeping, checked without a model or a timing:
the ONNX contenders' sorted batching, pooling and reordering, the contender
lists, and the output checks."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_e2e  # noqa: E402


class FakeTokenizer:
    """Text "a b c" -> ids [1, 2, 3] (one id a word, each 1 + its length)."""

    def encode_batch(self, texts):
        return [SimpleNamespace(ids=[1 + len(w) for w in t.split()]) for t in texts]


def test_embed_sorted_pools_real_tokens_and_restores_order():
    rng = np.random.default_rng(0)
    words = ["x" * k for k in range(1, 9)]
    texts = [" ".join(rng.choice(words, size=rng.integers(1, 12))) for _ in range(70)]
    table = rng.normal(size=(16, 5)).astype(np.float32)  # id -> hidden state
    batches = []

    def infer(feeds):
        ids, mask = feeds["input_ids"], feeds["attention_mask"]
        batches.append(ids.shape)
        assert ids.dtype == mask.dtype == feeds["token_type_ids"].dtype == np.int64
        assert not feeds["token_type_ids"].any()
        assert (mask.sum(1) == (ids != 0).sum(1)).all()  # padding: zeros, masked out
        assert mask[:, -1].any()  # padded to the batch's longest, no further
        hidden = table[ids]
        hidden[mask == 0] = 1e6  # padding must not reach the pooled vector
        return hidden

    vectors, efficiency = bench_e2e._embed_sorted(FakeTokenizer(), texts, infer)
    assert vectors.shape == (70, 5) and vectors.dtype == np.float32
    assert [b[0] for b in batches] == [32, 32, 6]
    lengths = [len(t.split()) for t in texts]
    assert [b[1] for b in batches] == [
        max(sorted(lengths, reverse=True)[i : i + 32]) for i in (0, 32, 64)
    ]
    assert efficiency == pytest.approx(sum(lengths) / sum(a * b for a, b in batches))
    for text, v in zip(texts, vectors, strict=True):
        mean = table[[1 + len(w) for w in text.split()]].mean(0)
        np.testing.assert_allclose(v, mean / np.linalg.norm(mean), rtol=1e-5, atol=1e-6)


def test_contender_lists_agree():
    assert set(bench_e2e.WORKERS) == set(bench_e2e.CONTENDERS)
    assert set(bench_e2e.EXPERTS) <= set(bench_e2e.CONTENDERS)
    assert {"onnxruntime", "openvino", "openvino-bf16"} <= set(bench_e2e.EXPERTS)


def _agreeing_vectors():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(20, 384)).astype(np.float32)
    return {name: base.copy() for name in bench_e2e.CONTENDERS}


def test_check_outputs_reports_every_onnx_contender():
    checks = bench_e2e.check_outputs(_agreeing_vectors())
    for name in ("onnxruntime", "openvino", "openvino-bf16"):
        assert checks[f"{name}_vs_st_min_cosine"] == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["onnxruntime", "openvino", "openvino-bf16"])
def test_check_outputs_refuses_a_wrong_onnx_contender(name):
    vectors = _agreeing_vectors()
    vectors[name][3] = -vectors[name][3]
    with pytest.raises(AssertionError, match="does not match its reference"):
        bench_e2e.check_outputs(vectors)


def test_check_outputs_of_a_subset_checks_against_the_expert():
    """--only without naive or sentence-transformers: the float32 JAX
    contenders are held to the expert's embeddings, bfloat16 ones by cosine."""
    full = _agreeing_vectors()
    subset = {k: full[k] for k in ("expert", "jaxbatch-pack", "jaxbatch-pack-bf16")}
    checks = bench_e2e.check_outputs(subset)
    assert set(checks) == {
        "jaxbatch-pack_vs_expert_max_abs_diff",
        "jaxbatch-pack-bf16_vs_expert_min_cosine",
    }
    subset["jaxbatch-pack"] = subset["jaxbatch-pack"] + 1e-3
    with pytest.raises(AssertionError, match="differ"):
        bench_e2e.check_outputs(subset)


def test_check_outputs_refuses_a_subset_with_nothing_to_check_against():
    full = _agreeing_vectors()
    with pytest.raises(ValueError, match="--only needs"):
        bench_e2e.check_outputs({"jaxbatch-pack": full["jaxbatch-pack"]})
    with pytest.raises(ValueError, match="nothing to check openvino against"):
        bench_e2e.check_outputs({"expert": full["expert"], "openvino": full["openvino"]})

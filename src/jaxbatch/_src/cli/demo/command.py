"""`jaxbatch demo`: embed a real corpus with a real transformer, through
jaxbatch, and show what the usual hand-written loop costs beside it.

    jaxbatch demo [--corpus FILE] [--text-column NAME] [--query TEXT]
                  [--output DIR] [--limit N] [--planner pack|auto] [--max-shapes K]
                  [--memory-budget BYTES] [--dtype float32|bfloat16] [--no-naive]

1. Tokenises the corpus (default: the paragraphs of CPython's
   ``pydoc_data.topics``; or a text file, one example per non-empty line, or
   a Parquet file's string column) with all-MiniLM-L6-v2's tokenizer,
   truncated at its 256 tokens.
2. Runs the embedding job through jaxbatch: rows of 256 tokens packed with
   several examples each (block-diagonal attention, per-segment pooling, one
   compilation), at most as many rows a batch as XLA's compiled memory
   analysis fits in the budget, spread evenly over the batches so the last
   is not half empty (or, with ``--planner auto``, AutoBuckets with that
   token budget: one example a row, a few shapes), the C++ loader's
   prefetch, jb.run's resumable Parquet output, progress bar and report.
   The memory plan's two compilations are cached across runs
   (docs/memory.md): a repeated run only traces the model.
   Packing is the default because it is faster here: 1.48x AutoBuckets'
   examples/s on 600 pydoc paragraphs (bench/bench_e2e.py).
3. Runs the naive job on the same ids: fixed batches of 32 in corpus order,
   padded to each batch's longest example, ``jax.jit(jax.vmap(...))``;
   checks both give the same embeddings (with ``--dtype bfloat16``, the
   job's bfloat16 embeddings against the naive job's float32 ones, at a
   cosine of at least 0.999); prints both side by side.
4. Prints the planners compared on the corpus's token lengths.
5. Answers a semantic-search query with the five nearest paragraphs.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.optional import require
from jaxbatch._src.base.words import counted
from jaxbatch._src.cli.common import usage_error
from jaxbatch._src.cli.demo.minilm import MiniLM, load_model
from jaxbatch._src.cli.plan import compare, format_table
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.data.default_data import pydoc_paragraphs
from jaxbatch._src.execute.memory import counting, estimate_memory, free_device_memory
from jaxbatch._src.job.job import run
from jaxbatch._src.job.read import read_output
from jaxbatch._src.plan.plan import plan
from jaxbatch._src.plan.planners import AutoBuckets, Pack

DEFAULT_QUERY = "How do I catch an exception and handle the error?"
NAIVE_BATCH_SIZE = 32
DEMO_MAX_SHAPES = 8
#: On CPU (no device memory statistics) the token budget is planned against
#: this many bytes: batches of a few thousand tokens, which keep the
#: attention scores of the longest bucket in cache. On an accelerator the
#: budget is the free device memory.
CPU_MEMORY_BUDGET = 256 << 20
CHECKPOINT_EVERY = 512
#: The lowest cosine a bfloat16 embedding may have to its float32 reference
#: (sentence-transformers' own bf16 autocast reaches 0.9999 on this corpus).
BFLOAT16_MIN_COSINE = 0.999


def load_corpus(path: str | None, text_column: str | None) -> tuple[list[str], str]:
    """Texts and a description of where they came from."""
    if path is None:
        return pydoc_paragraphs(), "pydoc topics (CPython's pydoc_data, embedded default)"
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"no such corpus file: {path}")
    if p.suffix.lower() in (".parquet", ".arrow", ".feather", ".ipc"):
        pa = require("pyarrow", f"jaxbatch demo reading {path}")
        feather = require("pyarrow.feather", f"jaxbatch demo reading {path}")
        pq = require("pyarrow.parquet", f"jaxbatch demo reading {path}")

        table = pq.read_table(p) if p.suffix.lower() == ".parquet" else feather.read_table(p)
        strings = [
            f.name
            for f in table.schema
            if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
        ]
        name = text_column or (strings[0] if strings else None)
        if name is None or name not in table.column_names:
            raise ValueError(
                f"{path}: expected a string column"
                + (f" named {text_column!r}" if text_column else "")
                + f"; its columns are {table.column_names}"
            )
        texts = table.column(name).to_pylist()
        nulls = sum(t is None for t in texts)
        if nulls:
            raise ValueError(f"{path}: column {name!r} has {nulls} null values")
        return texts, f"{path}, column {name!r}"
    with open(p, encoding="utf-8", errors="replace") as f:
        texts = [line.strip() for line in f if line.strip()]
    return texts, f"{path}, one example per non-empty line"


def plan_token_budget(model, budget: int | None) -> tuple[int, int, str]:
    """The AutoBuckets token budget from XLA's compiled memory analysis: the
    rows of the longest shape (256 tokens) whose compiled peak fits the
    budget, times 256. Returns (token budget, budget bytes, where from)."""
    import jax

    length = model.config.max_seq_length
    where = "bytes given"
    if budget is None:
        stats = jax.devices()[0].memory_stats() or {}
        if stats.get("bytes_limit"):
            budget, where = free_device_memory(), "free device memory"
        else:
            budget, where = CPU_MEMORY_BUDGET, "CPU default"
    example = {
        "input_ids": np.zeros(length, np.int32),
        "input_ids_mask": np.ones(length, bool),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimate = estimate_memory(model.embed_fn(), example, batch_sizes=(1, 16))
    for w in caught:  # the demo says it in its own line; others pass on
        if "YNNPACK" in str(w.message):
            where += "; XLA's YNNPACK fusions are not in its analysis: the peak can be higher"
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    rows = max(1, estimate.max_batch(budget))
    return rows * length, budget, where


def fewest_empty_rows(dataset, length: int, cap: int) -> Pack:
    """Pack with the cap on rows a batch, from ``cap`` down to half of it,
    whose plan of ``dataset`` leaves the fewest padded tokens (the largest
    cap on a tie). The engine plans each candidate (it spreads a shape's
    rows evenly over its batches, plan/balance.h), so the rule is its own.
    On CPU the demo's model costs the same per token at 10, 20 and 41 rows
    of 256 a batch (process CPU time 409, 404 and 428 us a token on a 2-core
    AMD EPYC), so smaller batches cost nothing there, and padding is all the
    difference.

    Example: 100 rows' worth of texts under a cap of 41 rows: four batches
    of 25, none empty (41 makes three of 34, two rows empty); 467 rows: 12
    batches of 39 under 41, one row empty."""
    best, best_padded = None, None
    for rows in range(cap, max(1, (cap + 1) // 2) - 1, -1):
        candidate = Pack(row_length=length, token_budget=rows * length)
        padded = plan(dataset, candidate).stats.padded_elements
        if best_padded is None or padded < best_padded:
            best, best_padded = candidate, padded
    return best


def job_planner(model, dataset, kind: str, max_shapes: int, token_budget: int):
    """(planner, per-row function) for the job: ``"auto"``, AutoBuckets with
    the token budget (one example per row, ``max_shapes`` compilations); or
    ``"pack"``, rows of the model's 256 tokens each holding several
    examples, block-diagonal attention and one embedding per segment (one
    compilation). The token budget caps the rows a batch and the planner
    spreads the rows evenly over the batches it needs: the budget's 41 rows
    of 256 would batch 600 pydoc paragraphs' 100 rows as 41, 41 and 18
    padded to 41 (80.5% real tokens); balanced, three batches of 34 (97.1%).
    On CPU the cap is then lowered, by at most half, to leave the fewest
    empty rows (:func:`fewest_empty_rows`: four batches of 25, 99.0%)."""
    import jax

    if kind == "pack":
        length = model.config.max_seq_length
        cap = max(1, token_budget // length)
        pack = Pack(row_length=length, token_budget=cap * length)
        if jax.devices()[0].platform == "cpu":
            pack = fewest_empty_rows(dataset, length, cap)
        return pack, model.embed_packed_fn(plan(dataset, pack).shapes[0].segments)
    return AutoBuckets(max_shapes, token_budget=token_budget), model.embed_fn()


def naive_job(model, ids: list[np.ndarray]) -> tuple[np.ndarray, dict]:
    """The hand-written way: batches of 32 in corpus order, each padded to its
    longest example, under jax.jit(jax.vmap(...)): one compile per new shape."""
    import jax

    # The weights are an argument, as an expert writes it: closed over, they
    # would be constants XLA folds on every one of the many compilations.
    jitted = jax.jit(lambda params, batch: jax.vmap(model.embed_fn(params=params))(batch))

    def embed(batch):
        return jitted(model.params, batch)

    shapes = set()
    real = padded = 0
    out = []
    start = time.perf_counter()
    for b in range(0, len(ids), NAIVE_BATCH_SIZE):
        chunk = ids[b : b + NAIVE_BATCH_SIZE]
        longest = max(len(x) for x in chunk)
        tokens = np.zeros((len(chunk), longest), np.int32)
        mask = np.zeros((len(chunk), longest), bool)
        for r, x in enumerate(chunk):
            tokens[r, : len(x)] = x
            mask[r, : len(x)] = True
        shapes.add(tokens.shape)
        real += int(mask.sum())
        padded += tokens.size
        out.append(np.asarray(embed({"input_ids": tokens, "input_ids_mask": mask})))
    wall = time.perf_counter() - start
    return np.concatenate(out), {
        "wall": wall,
        "compilations": len(shapes),
        "efficiency": real / padded,
    }


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, r in enumerate(rows):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def demo_command(args) -> int:
    try:
        return _demo(args)
    except (ValueError, ImportError, OSError) as e:
        return usage_error("demo", e)


def _demo(args) -> int:
    import jax

    texts, source = load_corpus(args.corpus, args.text_column)
    if args.limit:
        texts = texts[: args.limit]
    if not texts:
        raise ValueError(f"{source} holds no text")
    t0 = time.perf_counter()
    model = load_model(dtype=args.dtype)
    load_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    ids = model.tokenize(texts)
    tokenize_seconds = time.perf_counter() - t0
    lengths = np.array([len(x) for x in ids])
    print(f"corpus: {source}")
    print(
        f"{counted(len(texts), 'text')}, {counted(int(lengths.sum()), 'token')} "
        f"(all-MiniLM-L6-v2 tokenizer, truncated "
        f"at {model.config.max_seq_length}); lengths: mean {lengths.mean():.1f}, median "
        f"{np.median(lengths):.0f}, max {lengths.max()}"
    )
    print(
        f"model: all-MiniLM-L6-v2 in JAX, {model.dtype} ({model.folder}), loaded in "
        f"{load_seconds:.2f} s; "
        f"tokenised in {tokenize_seconds:.2f} s; JAX on {jax.devices()[0].platform}\n"
    )
    dataset = Dataset.from_arrays({"input_ids": ids})

    # 1. The job, through jaxbatch.
    t0 = time.perf_counter()
    with counting() as plan_count:  # Compilations the plan cache saved, if any.
        token_budget, budget, where = plan_token_budget(model, args.memory_budget)
    planning_seconds = time.perf_counter() - t0
    planner, fun = job_planner(model, dataset, args.planner, args.max_shapes, token_budget)
    length = model.config.max_seq_length
    lowered = planner.token_budget != token_budget and isinstance(planner, Pack)
    print(
        f"jaxbatch: memory plan ({where}, {budget / 2**20:.0f} MiB): token budget "
        f"{token_budget} ({token_budget // length} rows of {length}"
        + (
            f"; at most {planner.token_budget // length} a batch: fewest empty rows"
            if lowered
            else ""
        )
        + f"), planned in {planning_seconds:.2f} s, {plan_count}"
    )
    output = Path(args.output) if args.output else Path(tempfile.mkdtemp(prefix="jaxbatch-demo-"))

    # The weights' hash and dtype: resuming the output with other weights, or
    # in another dtype, is refused.
    digest = _core.hash_file(str(model.folder / "model.safetensors"))
    tag = f"all-MiniLM-L6-v2:{digest:016x}:{model.dtype}"
    t0 = time.perf_counter()
    report = run(
        fun,
        dataset,
        output,
        planner=planner,
        checkpoint_every=CHECKPOINT_EVERY,
        progress=not args.no_progress,
        tag=tag,
        name="jaxbatch._src.cli.demo.minilm:MiniLM."
        + ("embed_packed_fn" if args.planner == "pack" else "embed_fn"),
    )
    job_seconds = time.perf_counter() - t0 + planning_seconds
    print(report)
    vectors = read_output(output)["output"]

    # 2. The naive job, on the same token ids.
    rows = [
        (
            "",
            f"naive (batches of {NAIVE_BATCH_SIZE}, pad to longest)",
            f"jaxbatch (jb.run, {type(planner).__name__})",
        ),
    ]
    if not args.no_naive:
        print("\nnaive: batches of 32 in corpus order padded to their longest, jit(vmap(...)) ...")
        # The naive job is the float32 reference, whatever the job's dtype.
        reference = model if model.dtype == "float32" else load_model()
        naive_vectors, naive = naive_job(reference, ids)
        diff = float(np.abs(naive_vectors - vectors).max())
        cosine = float((naive_vectors * vectors).sum(1).min())
        if model.dtype != "float32" and cosine < BFLOAT16_MIN_COSINE:
            raise ValueError(
                f"the {model.dtype} embeddings are too far from the float32 ones: lowest "
                f"cosine {cosine:.6f}, expected at least {BFLOAT16_MIN_COSINE}"
            )
        rows += [
            ("wall time (s)", f"{naive['wall']:.2f}", f"{job_seconds:.2f}"),
            ("examples/s", f"{len(ids) / naive['wall']:.1f}", f"{len(ids) / job_seconds:.1f}"),
            (
                "padding efficiency",
                f"{naive['efficiency']:.1%}",
                f"{report.padding_efficiency:.1%}",
            ),
            ("compilations", str(naive["compilations"]), str(report.compilations)),
            ("speed-up", "1.00x", f"{naive['wall'] / job_seconds:.2f}x"),
        ]
        print(f"\n{_table(rows)}")
        print(
            ("same embeddings" if model.dtype == "float32" else f"{model.dtype} against float32")
            + f": max |difference| {diff:.2e}, lowest cosine {cosine:.6f}; the "
            f"jaxbatch time includes memory planning, compiling and writing Parquet"
        )

    # 3. The planners on the corpus's real token lengths.
    print(f"\nplanners on these token lengths (token budget {token_budget}):")
    print(format_table(compare(lengths, args.max_shapes, max(token_budget, int(lengths.max())))))

    # 4. A semantic search over the embeddings.
    query = model.tokenize([args.query])[0]
    q = np.asarray(
        jax.jit(model.embed_fn())({"input_ids": query, "input_ids_mask": np.ones(len(query), bool)})
    )
    scores = vectors @ q
    print(f"\nquery: {args.query!r}; the five nearest paragraphs:")
    for rank, i in enumerate(np.argsort(-scores)[:5], 1):
        text = " ".join(texts[i].split())
        print(f"  {rank}. [{scores[i]:.3f}] #{i}: {text[:110]}{'...' if len(text) > 110 else ''}")
    print(
        f"\nembeddings: {vectors.shape} in {output} (jb.read_output); report: {output}/report.json"
    )
    return 0


def add_demo_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="embed a corpus with all-MiniLM-L6-v2 in JAX through jaxbatch, against a naive loop",
    )
    p.add_argument("--corpus", metavar="FILE", help="text (one example per line) or Parquet file")
    p.add_argument("--text-column", metavar="NAME", help="string column of a Parquet corpus")
    p.add_argument("--query", default=DEFAULT_QUERY, help="a semantic-search query")
    p.add_argument("--output", metavar="DIR", help="keep the job's output here (resumable)")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N texts")
    p.add_argument(
        "--planner",
        choices=("pack", "auto"),
        default="pack",
        help="pack: sequence packing, one compilation (default); auto: AutoBuckets with a "
        "token budget",
    )
    p.add_argument("--max-shapes", type=int, default=DEMO_MAX_SHAPES, metavar="K")
    p.add_argument(
        "--memory-budget",
        type=int,
        metavar="BYTES",
        help="bytes the token budget is planned against (default: free device "
        "memory, or 256 MiB on CPU)",
    )
    p.add_argument(
        "--dtype",
        choices=MiniLM.DTYPES,
        default="float32",
        help="the weights' and matmuls' dtype (layer norms and softmax stay float32; "
        "bfloat16 is checked against the float32 naive job at cosine >= "
        f"{BFLOAT16_MIN_COSINE})",
    )
    p.add_argument("--no-naive", action="store_true", help="skip the naive comparison")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=demo_command)

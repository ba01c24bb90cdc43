"""Training benchmark: a small byte-level language model in JAX, six ways.

The model: byte embedding (256 ids) + learned positions, 2 pre-norm
transformer layers (width 64, 2 heads, MLP 256) with causal attention, and a
next-byte softmax; Adam written in JAX (lr 3e-3). Data: CPython's pydoc
topics paragraphs (jaxbatch._src.data.default_data, nothing downloaded), UTF-8 bytes,
each cut to its first 512. The last EVAL_EXAMPLES paragraphs are held out;
training uses the first paragraphs of the rest until they hold --tokens real
tokens, once each, in one epoch. Every way trains on exactly these examples
(checked: real tokens seen and example ids), from the same initial
parameters, with the same loss: the mean next-byte cross entropy over the
batch's real targets (a target counts when it and the byte before it are in
the same example; padding never counts).

  naive    batches of 16 examples in corpus order, each padded to its longest
           example; jax.jit compiles once per new padded length;
  pad64    the same batches padded to a multiple of 64 (at most 8 lengths);
  padmax   (expert) the same batches padded to 16 x 512: one shape, one compile;
  hand_buckets
           (expert, about 20 lines) windows of 256 examples in corpus order,
           each sorted by length; an example pads to the power of two >= its
           length (at least 16), and each length's batches have
           2560 // length rows (the last of a window padded with empty rows):
           at most 6 shapes;
  buckets  jb.Loader(jb.AutoBuckets(4, token_budget=2560)), shuffled: at most
           4 shapes, short examples in big batches;
  pack     jb.Loader(jb.Pack(512, 5)), shuffled: 5 rows of 512 bytes, several
           examples per row; attention is jb.masked.packed_attention(segment_ids,
           is_causal=True) (on CPU the C++ kernel, which computes only within
           segments) and positions come from the batch: one shape.
The four hand-written ways batch, mask and attend with their own code and
import nothing of jaxbatch (tests/test_fair_baselines.py runs them with jaxbatch
hidden): a causal key-padding mask over their padded rows, applied as an
additive bias (expert_attention.py; the faster of it and
jax.nn.dot_product_attention with the mask). jaxbatch's corpus only gives
every way its paragraphs.

The batch sizes are chosen so a step sees a similar number of real tokens
(measured at 100k tokens: 1.8k-2.5k) and the ways take a similar number of
Adam steps (40-55).
Each distinct input shape is compiled ahead of time (jit(...).lower().compile())
and counted: compilations and compile seconds are exact. Wall time covers
planning, loading, compiling and training; tokens/s is real tokens per wall
second. The final loss is the mean next-byte cross entropy on the held-out
paragraphs, computed by one evaluation function for all four ways; the ways
must agree to LOSS_TOLERANCE (see there).

Figures are medians of alternating repetitions with their min-max (bench/
harness.py); every repetition recompiles (jax.clear_caches()), as a fresh
job would.

Run: ``.venv/bin/python bench/bench_train.py [--tokens N] [--reps R]
[--quick] [--force]``. Writes bench/results/bench_train.json.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import adam  # noqa: E402
import expert_attention  # noqa: E402
import harness  # noqa: E402
import transformer  # noqa: E402

WAYS = ("naive", "pad64", "padmax", "hand_buckets", "buckets", "pack")
# What an expert writes by hand, the baselines the ratios are taken against;
# naive and pad64 are the naive ones.
EXPERT_WAYS = ("padmax", "hand_buckets")
JAXBATCH_WAYS = ("buckets", "pack")
MAX_LEN = 512  # bytes kept per paragraph (4% of them are longer)
VOCAB = 256
WIDTH, HEADS, MLP, LAYERS = 64, 2, 256, 2
LEARNING_RATE = 3e-3
NAIVE_BATCH = 16  # examples per naive / pad64 batch
PAD_MULTIPLE = 64
BUCKET_SHAPES, BUCKET_BUDGET = 4, 2560  # AutoBuckets: shapes, elements per batch
HAND_WINDOW, HAND_MIN_LENGTH = 256, 16  # hand_buckets: examples sorted together, shortest length
PACK_ROWS = 5  # Pack: rows of MAX_LEN per batch
EVAL_EXAMPLES = 128
FULL_TOKENS = 100_000
QUICK_TOKENS = 1_500
QUICK_EVAL_EXAMPLES = 16
# --quick checks the benchmark, not its timings: XLA's backend optimisations
# off halve the compile time, so the smoke test stays short on 2 cores.
QUICK_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}
# The ways see the same examples but in different batches (and so a
# different number of Adam steps, in a different order): their held-out
# losses are close but not equal. Measured (README, Performance): naive and
# pad64 agree exactly (the same batches, only more padding: padding never
# counts), pack is 0.1% off, buckets 3.9% lower (55 steps against 40-43).
# 5% of the median of the four admits that, and is small against what
# training does to the loss (ln 256 = 5.55 untrained, ~2.9 after 100k
# tokens). --quick trains one or two steps from a near-uniform start, where
# one extra step moves the loss by several percent; QUICK_LOSS_TOLERANCE
# only checks that the ways ran alike.
LOSS_TOLERANCE = 0.05
QUICK_LOSS_TOLERANCE = 0.15


# -- data -------------------------------------------------------------------


def byte_examples(paragraphs: list[str]) -> list[np.ndarray]:
    """Each paragraph's UTF-8 bytes (its first MAX_LEN) as int32 ids."""
    return [
        np.frombuffer(p.encode("utf-8")[:MAX_LEN], np.uint8).astype(np.int32) for p in paragraphs
    ]


def split(tokens: int, eval_examples: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(train, held out): the held-out slice is the corpus's last
    ``eval_examples`` paragraphs; train is the shortest prefix of the rest
    holding at least ``tokens`` bytes."""
    from jaxbatch._src.data.default_data import pydoc_paragraphs

    examples = byte_examples(pydoc_paragraphs())
    rest, held_out = examples[:-eval_examples], examples[-eval_examples:]
    total = np.cumsum([len(e) for e in rest])
    if tokens > total[-1]:
        raise ValueError(f"--tokens {tokens} is more than the {total[-1]} training tokens")
    n = int(np.searchsorted(total, tokens)) + 1
    return rest[:n], held_out


def pad_rows(examples: list[np.ndarray], length: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, segment ids) [rows, length]: segment id 1 on real bytes, 0 on padding."""
    tokens = np.zeros((len(examples), length), np.int32)
    segments = np.zeros((len(examples), length), np.int32)
    for row, e in enumerate(examples):
        tokens[row, : len(e)] = e
        segments[row, : len(e)] = 1
    return tokens, segments


def with_positions(tokens: np.ndarray, segments: np.ndarray, index: np.ndarray) -> dict:
    positions = np.broadcast_to(np.arange(tokens.shape[1], dtype=np.int32), tokens.shape)
    return {"tokens": tokens, "positions": positions, "segments": segments, "index": index}


def hand_batches(train: list[np.ndarray], multiple: int, full: bool = False) -> Iterator[dict]:
    """What one writes by hand: NAIVE_BATCH examples in corpus order, padded
    to their longest rounded up to ``multiple`` (``full``: the last batch
    padded to NAIVE_BATCH rows too, so one shape)."""
    for start in range(0, len(train), NAIVE_BATCH):
        chunk = train[start : start + NAIVE_BATCH]
        longest = max(len(e) for e in chunk)
        tokens, segments = pad_rows(chunk, -(-longest // multiple) * multiple)
        if full:
            tokens, segments = (
                np.pad(a, ((0, NAIVE_BATCH - len(chunk)), (0, 0))) for a in (tokens, segments)
            )
        yield with_positions(tokens, segments, np.arange(start, start + len(chunk)))


def hand_bucket_batches(train: list[np.ndarray]) -> Iterator[dict]:
    """What an expert writes by hand: sort each window of HAND_WINDOW
    examples by length, pad each to the power of two >= its length, and give
    each length BUCKET_BUDGET // length rows (the same element budget as
    AutoBuckets), a window's last batch of a length padded with empty rows."""
    for start in range(0, len(train), HAND_WINDOW):
        ids = range(start, min(start + HAND_WINDOW, len(train)))
        by_length: dict[int, list[int]] = {}
        for i in sorted(ids, key=lambda i: len(train[i])):
            length = max(HAND_MIN_LENGTH, 1 << (len(train[i]) - 1).bit_length())
            by_length.setdefault(length, []).append(i)
        for length, members in by_length.items():
            rows = BUCKET_BUDGET // length
            for k in range(0, len(members), rows):
                chunk = members[k : k + rows]
                tokens, segments = pad_rows([train[i] for i in chunk], length)
                tokens = np.pad(tokens, ((0, rows - len(chunk)), (0, 0)))
                segments = np.pad(segments, ((0, rows - len(chunk)), (0, 0)))
                yield with_positions(tokens, segments, np.asarray(chunk))


def loader_batches(train: list[np.ndarray], planner) -> Iterator[dict]:
    """jb.Loader batches (shuffled, one epoch) as the model's inputs."""
    import jaxbatch as jb

    ds = jb.Dataset.from_arrays({"tokens": train})
    with jb.Loader(ds, planner, shuffle=True, seed=0, epochs=1, num_threads=2) as loader:
        for b in loader:
            if "tokens_segment_ids" in b:
                yield {
                    "tokens": b["tokens"],
                    "positions": b["tokens_positions"],
                    "segments": b["tokens_segment_ids"],
                    "index": b["example_index"],
                }
            else:
                mask = b["tokens_mask"]
                yield with_positions(b["tokens"], mask.astype(np.int32), b["example_index"])


def batches(way: str, train: list[np.ndarray]) -> Iterator[dict]:
    if way == "naive":
        return hand_batches(train, 1)
    if way == "pad64":
        return hand_batches(train, PAD_MULTIPLE)
    if way == "padmax":
        return hand_batches(train, MAX_LEN, full=True)
    if way == "hand_buckets":
        return hand_bucket_batches(train)
    if way in JAXBATCH_WAYS:
        import jaxbatch as jb

        if way == "buckets":
            return loader_batches(train, jb.AutoBuckets(BUCKET_SHAPES, token_budget=BUCKET_BUDGET))
        return loader_batches(train, jb.Pack(MAX_LEN, PACK_ROWS))
    raise ValueError(f"unknown way {way!r}; expected one of {WAYS}")


# -- model ------------------------------------------------------------------


def init_params(seed: int = 0) -> dict:
    import jax
    import jax.numpy as jnp

    keys = iter(jax.random.split(jax.random.PRNGKey(seed), 4 + 4 * LAYERS))
    layers = transformer.init_layers(keys, LAYERS, WIDTH, MLP)
    return {
        "embed": jax.random.normal(next(keys), (VOCAB, WIDTH)) * 0.02,
        "position": jax.random.normal(next(keys), (MAX_LEN, WIDTH)) * 0.02,
        "layers": layers,
        "norm": jnp.ones(WIDTH),
        "head": jax.random.normal(next(keys), (WIDTH, VOCAB), jnp.float32) / math.sqrt(WIDTH),
    }


def logits_fn(params, tokens, positions, segments, expert: bool):
    """Next-byte logits [rows, L, VOCAB]; a query attends to earlier bytes of
    its own segment only (segment 0 is padding). ``expert``: the baselines'
    own attention over their padded rows (one example a row: a causal
    key-padding mask, expert_attention.py, no jaxbatch); else jaxbatch's
    packed attention over the segments (on CPU the C++ kernel)."""
    x = params["embed"][tokens] + params["position"][positions]
    if expert:
        allowed = expert_attention.key_mask(segments != 0, causal=True)

        def attend(q, k, v):
            return expert_attention.attend(q, k, v, allowed)
    else:
        import jaxbatch as jb

        def attend(q, k, v):  # [rows, heads, L, d]; a padded row is one segment
            return jb.masked.packed_attention(q, k, v, segments, is_causal=True, layout="BNTH")

    x = transformer.encode(params["layers"], x, attend, HEADS)
    return transformer.norm(x, params["norm"]) @ params["head"]


def loss_terms(params, tokens, positions, segments, expert: bool = True):
    """(sum of next-byte cross entropies, number of real targets): the target
    of position t is byte t+1 when both are in the same nonzero segment."""
    import jax
    import jax.numpy as jnp

    logits = logits_fn(params, tokens, positions, segments, expert)[:, :-1]
    targets = tokens[:, 1:]
    valid = (segments[:, 1:] == segments[:, :-1]) & (segments[:, :-1] != 0)
    logp = jax.nn.log_softmax(logits, -1)
    nll = -jnp.take_along_axis(logp, targets[..., None], -1)[..., 0]
    return jnp.sum(jnp.where(valid, nll, 0.0)), jnp.sum(valid)


def train_step(params, opt, tokens, positions, segments, expert: bool = True):
    """One Adam step on the batch's mean loss over its real targets."""
    import jax
    import jax.numpy as jnp

    def loss(p):
        total, count = loss_terms(p, tokens, positions, segments, expert)
        return total / jnp.maximum(count, 1)

    value, grads = jax.value_and_grad(loss)(params)
    params, opt = adam.update(params, opt, grads, LEARNING_RATE)
    return params, opt, value


class HeldOut:
    """Mean next-byte cross entropy over the held-out paragraphs: one padded
    batch and one compiled function (plain JAX), the same for every way
    (compiled once, outside the timings)."""

    def __init__(self, held_out: list[np.ndarray]):
        import jax

        tokens, segments = pad_rows(held_out, MAX_LEN)
        positions = np.broadcast_to(np.arange(MAX_LEN, dtype=np.int32), tokens.shape)
        self.inputs = (tokens, positions, segments)
        self.compiled = jax.jit(loss_terms).lower(init_params(), *self.inputs).compile()

    def __call__(self, params) -> float:
        total, count = self.compiled(params, *self.inputs)
        return float(total) / int(count)


# -- one training run -----------------------------------------------------------


def train(
    way: str,
    train_set: list[np.ndarray],
    initial: tuple[dict, dict],
    held_out: HeldOut,
    compiler_options: dict | None = None,
) -> dict:
    """Trains from ``initial`` (parameters, optimizer state), the same for
    every way and repetition; returns the measurements."""
    import jax

    jax.clear_caches()
    params, opt = initial
    expert = way not in JAXBATCH_WAYS  # the baselines run their own attention
    step = transformer.ShapeCache(functools.partial(train_step, expert=expert), compiler_options)
    real = elements = steps = 0
    seen: list[np.ndarray] = []
    t0 = time.perf_counter()
    for b in batches(way, train_set):
        real += int(np.count_nonzero(b["segments"]))
        elements += b["tokens"].size
        seen.append(np.asarray(b["index"]).ravel())
        params, opt, loss = step(params, opt, b["tokens"], b["positions"], b["segments"])
        steps += 1
    jax.block_until_ready(params)
    wall = time.perf_counter() - t0
    index = np.concatenate(seen)
    index = np.sort(index[index >= 0])
    if not np.array_equal(index, np.arange(len(train_set))):
        raise AssertionError(f"{way}: did not train on every example exactly once")
    return {
        "compilations": len(step.compiled),
        "shapes": sorted(list(s) for s in step.compiled),
        "compile_seconds": step.seconds,
        "wall_seconds": wall,
        "steps": steps,
        "real_tokens": real,
        "elements": elements,
        "padded_fraction": 1 - real / elements,
        "tokens_per_second": real / wall,
        "last_batch_loss": float(loss),
        "held_out_loss": held_out(params),
    }


# -- checks and report --------------------------------------------------------


def check(runs: dict[str, list[dict]], expected_tokens: int, tolerance: float) -> dict:
    """Fails loudly unless every run saw the same real tokens, losses are
    finite and agree, and the compilation counts have the structure the
    batching implies."""
    for way, rs in runs.items():
        for r in rs:
            if r["real_tokens"] != expected_tokens:
                raise AssertionError(
                    f"{way} trained on {r['real_tokens']} real tokens, expected {expected_tokens}"
                )
            if not math.isfinite(r["held_out_loss"]):
                raise AssertionError(f"{way}: held-out loss is {r['held_out_loss']}")
    first = {way: rs[0] for way, rs in runs.items()}
    losses = {way: float(np.median([r["held_out_loss"] for r in rs])) for way, rs in runs.items()}
    centre = float(np.median(list(losses.values())))
    worst = max(abs(v - centre) / centre for v in losses.values())
    if worst > tolerance:
        raise AssertionError(
            f"held-out losses disagree by {worst:.1%} (> {tolerance:.0%}) of their median "
            f"{centre:.4f}: {losses}"
        )
    counts = {way: r["compilations"] for way, r in first.items()}
    if counts["pack"] != 1:
        raise AssertionError(f"Pack compiled {counts['pack']} shapes, expected 1")
    if counts["buckets"] > BUCKET_SHAPES:
        raise AssertionError(f"AutoBuckets compiled {counts['buckets']} > {BUCKET_SHAPES} shapes")
    if not counts["naive"] >= counts["pad64"] <= MAX_LEN // PAD_MULTIPLE:
        raise AssertionError(f"padding to a multiple of {PAD_MULTIPLE}: {counts}")
    if counts["padmax"] != 1:
        raise AssertionError(f"padding to {MAX_LEN} compiled {counts['padmax']} shapes")
    hand_lengths = (MAX_LEN // HAND_MIN_LENGTH).bit_length()  # 16, 32, ..., 512
    if counts["hand_buckets"] > hand_lengths:
        raise AssertionError(f"hand buckets compiled {counts['hand_buckets']} > {hand_lengths}")
    return {"losses": losses, "loss_median": centre, "loss_max_relative_gap": worst}


def speedups(runs: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    """Each jaxbatch way's speed over the best expert way, repetition by
    repetition (the faster expert's wall seconds over this way's, in the same
    repetition): median with its spread."""
    walls = [[r["wall_seconds"] for r in runs[w]] for w in EXPERT_WAYS]
    best = [min(rep) for rep in zip(*walls, strict=True)]
    return {
        way: harness.summary([b / r["wall_seconds"] for b, r in zip(best, runs[way], strict=True)])
        for way in JAXBATCH_WAYS
    }


def report(result: dict) -> str:
    rows = [
        (
            "way",
            "compiles",
            "compile s",
            "wall s",
            "padded",
            "tokens/s",
            "steps",
            "held-out loss",
        )
    ]
    for way in WAYS:
        rs = result["runs"][way]
        rows.append(
            (
                f"{way} (expert)" if way in EXPERT_WAYS else way,
                str(rs[0]["compilations"]),
                harness.spread([r["compile_seconds"] for r in rs], ".1f"),
                harness.spread([r["wall_seconds"] for r in rs], ".1f"),
                f"{rs[0]['padded_fraction']:.1%}",
                harness.spread([r["tokens_per_second"] for r in rs], ".0f"),
                str(rs[0]["steps"]),
                harness.spread([r["held_out_loss"] for r in rs], ".3f"),
            )
        )
    return harness.format_table(rows)


def main(argv: list[str] | None = None) -> int:
    import jax

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, help=f"real training tokens (default {FULL_TOKENS})")
    harness.add_arguments(p)
    args = p.parse_args(argv)
    try:
        env = harness.check_load(args.force)
    except harness.LoadTooHigh as e:
        print(f"bench_train: {e}")
        return 1
    reps = harness.repetitions(args)
    tokens = args.tokens or (QUICK_TOKENS if args.quick else FULL_TOKENS)
    train_set, held_out = split(tokens, QUICK_EVAL_EXAMPLES if args.quick else EVAL_EXAMPLES)
    expected = sum(len(e) for e in train_set)
    print(
        f"bench_train: {len(train_set)} paragraphs, {expected} real tokens, "
        f"{len(held_out)} held out; {reps} alternating repetitions; {harness.describe(env)}"
        + (" (--quick: timings mean nothing)" if args.quick else ""),
        flush=True,
    )

    evaluate = HeldOut(held_out)
    params = init_params()
    initial = jax.block_until_ready((params, adam.init(params)))

    def contender(way):
        options = QUICK_COMPILER_OPTIONS if args.quick else None
        return lambda: train(way, train_set, initial, evaluate, options)

    def progress(rep, way, r):
        print(
            f"  rep {rep + 1} {way}: {r['wall_seconds']:.1f} s, {r['compilations']} compiles, "
            f"loss {r['held_out_loss']:.4f}",
            flush=True,
        )

    runs = harness.alternate({w: contender(w) for w in WAYS}, reps, progress)
    tolerance = QUICK_LOSS_TOLERANCE if args.quick else LOSS_TOLERANCE
    try:
        checks = check(runs, expected, tolerance)
    except AssertionError as e:
        # Keep the measurements for diagnosis, then fail loudly.
        harness.write_json("bench_train", {"runs": runs, "failed": str(e)})
        raise
    result = {
        "config": {
            "tokens": expected,
            "train_examples": len(train_set),
            "held_out_examples": len(held_out),
            "max_len": MAX_LEN,
            "model": f"{LAYERS}-layer transformer, width {WIDTH}, {HEADS} heads, MLP {MLP}",
            "learning_rate": LEARNING_RATE,
            "naive_batch": NAIVE_BATCH,
            "bucket_shapes": BUCKET_SHAPES,
            "bucket_token_budget": BUCKET_BUDGET,
            "pack_rows": PACK_ROWS,
            "reps": reps,
            "quick": args.quick,
            "loss_tolerance": tolerance,
        },
        "environment": env,
        "runs": runs,
        "summary": {
            way: {
                key: harness.summary([r[key] for r in rs])
                for key in ("compile_seconds", "wall_seconds", "tokens_per_second", "held_out_loss")
            }
            for way, rs in runs.items()
        },
        "checks": checks,
        "speedups": speedups(runs),
    }
    print()
    print(report(result))
    for way, s in result["speedups"].items():
        print(
            f"{way}: {s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f}) the faster expert way "
            f"({' or '.join(EXPERT_WAYS)}), wall time per repetition"
        )
    print(
        f"held-out losses agree within {checks['loss_max_relative_gap']:.1%} of their median "
        f"(tolerance {tolerance:.0%}); every way trained on the same {expected} real tokens"
    )
    path = harness.write_json("bench_train", result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

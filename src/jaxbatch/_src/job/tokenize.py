"""jb.tokenize: a text column to a token column, as a resumable, exactly-once
job whose output a Loader reads.

The documents (data/text.py) go through a Hugging Face tokenizer's batch
encoder (data/encode.py) a batch at a time, and their token ids are written
to Parquet shards with the machinery jb.run commits with (job/folder.py):
each shard is named in the journal, written atomically, hashed, and then
committed by its journal record, which holds where the next shard starts.
Shard k holds documents [k * checkpoint_every, (k + 1) * checkpoint_every)
whatever the batches, so a job killed at any moment and re-run writes the
same files as an uninterrupted run, each document exactly once.

A job is keyed on its documents (their file's bytes, or their text), the
tokenizer (its whole JSON, as set up), the options that change the tokens,
and ``tag``; a re-run with another is refused. ``on_error`` may change from
``"raise"`` on a resume (a run that raised committed no bad document), so a
job stopped by a bad document resumes with ``on_error="skip"``.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from jaxbatch._src.base.choices import check_choice
from jaxbatch._src.base.interrupt import raise_lost
from jaxbatch._src.base.optional import require
from jaxbatch._src.base.words import counted
from jaxbatch._src.collate import keys
from jaxbatch._src.data.encode import Encoded, Encoder
from jaxbatch._src.data.text import TextBatch, TextSource, open_text
from jaxbatch._src.execute.output_layout import Column
from jaxbatch._src.job.folder import (
    append_start,
    claim,
    reconcile,
    run_totals,
    settle,
    write_shard,
)
from jaxbatch._src.job.output import encode_parquet, to_table
from jaxbatch._src.job.progress import ProgressBar
from jaxbatch._src.load.loader import OnError

log = logging.getLogger("jaxbatch")

WHO = "jb.tokenize"
#: Documents per shard (and journal record) unless checkpoint_every says otherwise.
DEFAULT_DOCUMENTS_PER_SHARD = 65536
#: Documents per call of the tokenizer's batch encoder unless batch_size says otherwise.
DEFAULT_BATCH_SIZE = 2048
_FORMAT_VERSION = 1
#: What a job's key covers, for the refusal of a changed job (folder.reconcile).
KEYED = "input, tokenizer or options"


@dataclasses.dataclass
class TokenizeReport:
    """What a tokenizing job did, over all its runs.

    ``examples`` documents were written, with ``tokens`` tokens in all, as
    ``token_column`` of ``dtype``; ``skipped`` and ``quarantined`` were not
    (``skipped_kinds`` counts the skipped by kind; ``quarantine`` lists each
    quarantined document with its reason). ``total`` documents were read.
    ``seconds`` splits the committed work into reading, encoding and
    writing. ``repairs`` lists journal damage runs found and cut."""

    output: str
    complete: bool
    total: int
    examples: int
    tokens: int
    skipped: int
    quarantined: int
    quarantine: list[dict[str, Any]]
    skipped_kinds: dict[str, int]
    shards: int
    runs: int
    redone_shards: int
    seconds: dict[str, float]
    wall_seconds: float
    token_column: str
    dtype: str
    repairs: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        busy = sum(self.seconds.values())
        rate = (
            f" ({self.examples / busy:,.0f} documents/s, {self.tokens / busy:,.0f} tokens/s)"
            if busy > 0
            else ""
        )
        kinds: dict[str, int] = dict(self.skipped_kinds)
        for q in self.quarantine:
            kinds[f"quarantined, {q['kind']}"] = kinds.get(f"quarantined, {q['kind']}", 0) + 1
        s = self.seconds
        return "\n".join(
            [
                f"jb.tokenize {self.output}: {'complete' if self.complete else 'NOT complete'}; "
                f"{self.examples} of {counted(self.total, 'document')} written "
                f"({counted(self.tokens, 'token')}, column {self.token_column!r} of "
                f"{self.dtype}) in {counted(self.shards, 'shard')} "
                f"({counted(self.runs, 'run')}"
                + (f", {self.redone_shards} damaged shard(s) redone" if self.redone_shards else "")
                + ")",
                f"  skipped {self.skipped}, quarantined {self.quarantined}"
                + "".join(f"\n    {n} x {k}" for k, n in sorted(kinds.items())),
                f"  time: reading {s['reading']:.2f} s, encoding {s['encoding']:.2f} s, "
                f"writing {s['writing']:.2f} s{rate}; this run's wall time "
                f"{self.wall_seconds:.2f} s",
                *(
                    f"  journal repaired: damaged at byte {r['byte']} (record {r['record']}: "
                    f"{r['reason']}); {counted(r['dropped'], 'record')} cut, their work redone"
                    for r in self.repairs
                ),
            ]
        )


def tokenize(
    source: Any,
    output: str | os.PathLike,
    tokenizer: Any,
    *,
    text_column: str | None = None,
    token_column: str = "tokens",
    dtype: Any = None,
    add_special_tokens: bool = True,
    max_length: int | None = None,
    truncation: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    checkpoint_every: int = DEFAULT_DOCUMENTS_PER_SHARD,
    on_error: OnError = "raise",
    tag: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> TokenizeReport:
    """Tokenizes the text column of ``source`` into a token column written to
    ``output``, resumably and exactly once; a :class:`Loader` (or jb.run,
    or ``jaxbatch plan``) then reads ``output`` as a dataset.

    * ``source``: a list of strings; the path of a Parquet file (read by
      row group), an Arrow IPC file or a JSON Lines file (``.jsonl``: one
      JSON object a line, its ``"text"`` field unless ``text_column`` names
      another); a pyarrow Table; or a Hugging Face ``datasets.Dataset``.
      ``text_column``: the column of text (default: the only string column).
    * ``tokenizer``: a ``tokenizers.Tokenizer``, a transformers fast
      tokenizer, or the path of a ``tokenizer.json``. It is copied, never
      changed; its own padding and truncation settings are not used.
    * ``token_column`` and ``dtype``: the output column's name and integer
      type (default: the smallest of uint8, uint16, int32 and int64 that
      holds the vocabulary's ids). ``add_special_tokens``: as the
      tokenizer's encode takes it.
    * ``max_length``: with ``truncation=True``, documents are cut to that
      many tokens (special tokens included); without, a longer document is
      an error that ``on_error`` handles.
    * ``on_error``: a document that has no text (null, not a string, not
      UTF-8, a line that is not JSON), that the tokenizer fails on, that has
      no token (empty or blank) or too many: ``"raise"`` stops the job
      (what it committed stays: re-run with ``"skip"`` to resume past it),
      ``"skip"`` counts it by kind, ``"quarantine"`` lists it with its
      reason; neither is written.
    * ``batch_size``: documents per call of the batch encoder (it spreads
      them over its threads); ``checkpoint_every``: documents per shard and
      journal record (a crash costs at most one shard's work).
    * ``tag`` is keyed on too; ``overwrite=True`` deletes a previous job's
      files in ``output``. ``progress``: a tqdm bar.

    Each shard is a Parquet file of ``example_index`` (the document's index
    in the source) and the token column (a list of ids a document); read
    the whole output with :func:`jaxbatch.read_output`, or load it with
    ``jb.Loader(output, planner)``. Returns the :class:`TokenizeReport`,
    also written to ``report.json`` in ``output``.

    Example::

        jb.tokenize("corpus.jsonl", "tokens/", "tokenizer.json", max_length=512,
                    truncation=True, on_error="skip")
        loader = jb.Loader("tokens/", jb.Pack(row_length=512, rows_per_batch=8))
    """
    start_time = time.perf_counter()
    raise_lost()
    require("pyarrow", f"{WHO} (it writes Parquet)")
    _check_args(token_column, batch_size, checkpoint_every, on_error)
    encoder = Encoder(
        tokenizer,
        dtype=dtype,
        add_special_tokens=add_special_tokens,
        max_length=max_length,
        truncation=truncation,
        who=WHO,
    )
    texts = open_text(source, text_column, WHO)
    fingerprint = {
        "format": _FORMAT_VERSION,
        "job": "tokenize",
        "input": texts.fingerprint(),
        "documents": texts.count,
        "tokenizer": encoder.fingerprint,
        "options": {
            "text_column": texts.column,
            "token_column": token_column,
            "dtype": encoder.dtype.name,
            "add_special_tokens": encoder.add_special_tokens,
            "max_length": max_length if max_length is None else int(max_length),
            "truncation": encoder.truncation,
            "checkpoint_every": int(checkpoint_every),
            "tag": tag,
        },
    }
    inputs = [texts.path] if texts.path else []
    folder, journal = claim(Path(output), overwrite=overwrite, inputs=inputs, who=WHO)
    with journal:
        reconcile(folder, journal, _differences(journal.records, fingerprint, on_error), KEYED)
        if not journal.records:
            journal.append(
                {
                    "kind": "job",
                    "fingerprint": fingerprint,
                    "source": texts.name,
                    "created": time.time(),
                }
            )
        shards, done, redone = settle(folder, journal)
        if not done:
            resumed_at = shards[-1]["state"]["next"] if shards else 0
            append_start(journal, on_error=on_error, resumed_at=resumed_at, redone=redone)
            run = _Run(texts, encoder, folder, journal, shards, on_error, token_column)
            shards = run.run(batch_size, int(checkpoint_every), progress)
            journal.append({"kind": "done", "time": time.time(), "documents": run.read})
        else:
            log.info("%s: the job in %s is already complete", WHO, folder.path)
        done_record = next(r for r in journal.records if r.get("kind") == "done")
        report = _report(
            folder.path,
            shards,
            done_record,
            run_totals(journal),
            time.perf_counter() - start_time,
            token_column,
            encoder.dtype.name,
        )
    folder.write_report(report.to_dict())
    return report


def _check_args(token_column: Any, batch_size: Any, checkpoint_every: Any, on_error: Any) -> None:
    check_choice(WHO, "on_error", on_error, OnError)
    for option, value in (("batch_size", batch_size), ("checkpoint_every", checkpoint_every)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{WHO}: {option} must be an int >= 1 (documents), found {value!r}")
    if not isinstance(token_column, str) or not token_column:
        raise ValueError(f"{WHO}: token_column must be a non-empty str, found {token_column!r}")
    if token_column == keys.EXAMPLE_INDEX:
        raise ValueError(
            f"{WHO}: token_column {token_column!r} is the name of the column that holds each "
            f"document's index; choose another name"
        )


# -- Resuming --------------------------------------------------------------------


def _differences(records: list[dict], fingerprint: dict, on_error: str) -> list[str]:
    """What differs between the job in the journal (if any) and this call,
    for folder.reconcile."""
    if not records:
        return []
    old = records[0].get("fingerprint", {}) if records[0].get("kind") == "job" else {}
    out = []
    for key in ("format", "job", "input", "documents", "tokenizer"):
        if old.get(key) != fingerprint[key]:
            out.append(f"{key}: was {old.get(key)!r}, now {fingerprint[key]!r}")
    recorded = old.get("options", {})
    for key, value in fingerprint["options"].items():
        if recorded.get(key) != value:
            out.append(f"option {key}: was {recorded.get(key)!r}, now {value!r}")
    # A run that raised committed no bad document: what follows may skip them.
    last = [r["on_error"] for r in records if r.get("kind") == "start"][-1:]
    if last and last[0] not in ("raise", on_error):
        out.append(f"option on_error: was {last[0]!r}, now {on_error!r}")
    return out


# -- A run -------------------------------------------------------------------------


def pieces(batches: Iterator[TextBatch], size: int, every: int) -> Iterator[TextBatch]:
    """The documents of `batches` (consecutive, from a multiple of `every`)
    in pieces of `size`, none across a multiple of `every` (a shard's
    end): a piece ending there is the last of its shard."""
    parts: list[TextBatch] = []
    held = 0
    for batch in batches:
        position = 0
        while position < len(batch):
            first = batch.first + position
            boundary = (first // every + 1) * every
            take = min(len(batch) - position, size - held, boundary - first)
            parts.append(batch.slice(position, position + take))
            held += take
            position += take
            if held == size or first + take == boundary:
                yield TextBatch.join(parts)
                parts, held = [], 0
    if parts:
        yield TextBatch.join(parts)


class _Run:
    """One run of a job: from the last committed shard to the end. One
    batch is in the encoder's threads (the GIL released) while this thread
    reads and prepares the next, turns the one before into numpy and writes
    shards."""

    def __init__(
        self, texts: TextSource, encoder: Encoder, folder, journal, shards, on_error, column
    ):
        self.texts, self.encoder, self.folder, self.journal = texts, encoder, folder, journal
        self.shards, self.on_error, self.column = list(shards), on_error, column
        self.start = shards[-1]["state"]["next"] if shards else 0
        self.read = self.start  # Documents read (from 0) when the run ends.
        self.pending: list[Encoded] = []  # The open shard's batches.
        self.shard_first = self.start
        self.seconds = dict.fromkeys(("reading", "encoding", "writing"), 0.0)
        self.tokens = 0

    def run(self, batch_size: int, every: int, progress: bool) -> list[dict]:
        bar = ProgressBar(progress, self.texts.count, self.start, who=WHO, unit="doc")
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jb.tokenize")
        in_flight: collections.deque = collections.deque()
        t0 = time.perf_counter()
        try:
            stream = pieces(self.texts.batches(self.start), batch_size, every)
            while True:
                raise_lost()
                t = time.perf_counter()
                piece = next(stream, None)
                self.seconds["reading"] += time.perf_counter() - t
                if piece is None:
                    break
                t = time.perf_counter()
                prepared = self.encoder.prepare(piece, self.texts.null_reason)
                future = pool.submit(self.encoder.encode_texts, prepared.strings)
                self.seconds["encoding"] += time.perf_counter() - t
                in_flight.append((piece, prepared, future))
                if len(in_flight) > 1:
                    self._take(*in_flight.popleft(), every, bar, t0)
            while in_flight:
                self._take(*in_flight.popleft(), every, bar, t0)
            if self.read > self.shard_first:
                self._commit()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            bar.close()
        return self.shards

    def _take(self, piece: TextBatch, prepared, future, every: int, bar, t0: float) -> None:
        """A piece's encoding, when the encoder has done it, into the open
        shard; the shard is committed where it ends."""
        t = time.perf_counter()
        try:
            encodings = future.result()
        except Exception:  # noqa: BLE001 - the tokenizer raises plain Exception
            encodings = None  # finish() encodes each document alone.
        encoded = self.encoder.finish(prepared, encodings)
        self.seconds["encoding"] += time.perf_counter() - t
        if encoded.bad and self.on_error == "raise":
            raise _bad_document(encoded.bad, self.texts.name)
        self.pending.append(encoded)
        self.tokens += int(encoded.lengths.sum())
        self.read = piece.first + len(piece)
        if self.read % every == 0:
            self._commit()
        rate = self.tokens / max(time.perf_counter() - t0, 1e-9)
        bar.update(len(piece), tokens_per_s=f"{rate:,.0f}")

    def _commit(self) -> None:
        """Writes the open shard's documents [shard_first, read) as the next
        shard and commits it."""
        t = time.perf_counter()
        pending, dtype = self.pending, self.encoder.dtype
        documents = np.concatenate([e.documents for e in pending] or [np.zeros(0, np.int64)])
        lengths = np.concatenate([e.lengths for e in pending] or [np.zeros(0, np.int64)])
        ids = np.concatenate([e.ids for e in pending] or [np.zeros(0, dtype)])
        table = to_table(documents, {self.column: Column(ids, lengths)})
        named = write_shard(self.folder, self.journal, len(self.shards), encode_parquet(table))
        bad = [b for e in pending for b in e.bad]
        self.seconds["writing"] += time.perf_counter() - t
        record = {
            **named,
            "examples": len(documents),
            "tokens": int(lengths.sum()),
            "first": self.shard_first,
            "state": {"next": self.read},
            "seconds": self.seconds,
        }
        if self.on_error == "quarantine":
            record["bad"] = [{"example": d, "kind": k, "reason": r} for d, k, r in bad]
        else:
            kinds: dict[str, int] = {}
            for _, kind, _ in bad:
                kinds[kind] = kinds.get(kind, 0) + 1
            record["skipped"] = kinds
        self.journal.append(record)
        self.shards.append(record)
        self.pending, self.shard_first = [], self.read
        self.seconds = dict.fromkeys(self.seconds, 0.0)


def _bad_document(bad: list[tuple[int, str, str]], name: str) -> ValueError:
    document, _, reason = bad[0]
    more = f" ({len(bad) - 1} more in the same batch)" if len(bad) > 1 else ""
    return ValueError(
        f"{WHO}: document {document} of {name}: {reason}{more}; pass on_error='skip' or "
        f"'quarantine' to set such documents aside (counted in the report): the job resumes "
        f"from its last checkpoint"
    )


def _report(path, shards, done, totals, wall, column, dtype) -> TokenizeReport:
    """Adds up the committed shards of every run (`totals`: run_totals)."""
    runs, redone, repairs = totals
    seconds = dict.fromkeys(("reading", "encoding", "writing"), 0.0)
    quarantine: list[dict[str, Any]] = []
    kinds: dict[str, int] = {}
    for r in shards:
        for k in seconds:
            seconds[k] += r["seconds"][k]
        quarantine.extend(r.get("bad", []))
        for kind, n in r.get("skipped", {}).items():
            kinds[kind] = kinds.get(kind, 0) + n
    examples = sum(r["examples"] for r in shards)
    return TokenizeReport(
        output=str(path),
        complete=True,
        total=done["documents"],
        examples=examples,
        tokens=sum(r["tokens"] for r in shards),
        skipped=sum(kinds.values()),
        quarantined=len(quarantine),
        quarantine=quarantine,
        skipped_kinds=kinds,
        shards=len(shards),
        runs=runs,
        redone_shards=redone,
        seconds=seconds,
        wall_seconds=wall,
        token_column=column,
        dtype=dtype,
        repairs=repairs,
    )

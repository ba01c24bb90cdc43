"""A job continued on another number of processes (``jb.run(...,
shard=(i, m), elastic=True)``): its generations of parts, what a new
generation takes as done, and the chain read back. Every rule of it is here.

A job on n processes writes generation 0: ``output/process-IIIII-of-NNNNN``
(``output`` itself for n = 1). Run again on m != n processes with
``elastic=True``, each new process reads (never writes) every earlier
part's journal and shards and takes as done what that part committed: its
leading run of whole shards (the rule a writer's settle keeps: a recorded
shard that is missing, torn or corrupt is redone, with every shard after
it), i.e. those shards' written examples and the examples the function set
aside there. The examples left are the remaining ones, in example order;
the m processes plan them as one view of the input and each runs its share
of that plan, as a job on m processes runs its share of the whole input.
Every process computes the same remaining examples from the same journals,
so their shares never meet. They write generation g + 1 beside the old
parts (``process-IIIII-of-MMMMM-generation-G``, folder.process_folder), and
each journal's job record names what it continues (``continues``: the
generation; per earlier part the shards taken, the shard records its
journal held and the examples taken; the remaining examples' count and hash).
A process of the new count that starts later joins that generation (its own
part resumes as any part does); a count that differs again starts the next.

An earlier part's files are never touched: a damaged shard there stays as it
is; the new generation redoes its examples, and the reader reads of each
earlier part only the shards the latest generation took (checked against
their recorded hashes), never the damaged shard, so each example is read once.
The reader refuses, naming the parts, a chain that does not hold together:
parts of one generation that continue different things; an earlier part run
again since it was continued (more shard records than were taken into
account) or not continued at all (made later); an example twice; an example
in no part (of a finished chain, beyond the skips its loaders counted).
Loader-skipped examples of an earlier part are not recorded one by one, so a
new generation meets them again and skips them again (counted in its report).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.job.folder import (
    JOURNAL_NAME,
    Committed,
    JobError,
    JobFolder,
    Journal,
    Shard,
    process_folder,
    process_parts,
    read_committed,
)
from jaxbatch._src.job.output import example_indices, read_shards

log = logging.getLogger("jaxbatch")

# Examples or parts named in one refusal.
_SHOWN = 5
_NO_EXAMPLES = np.zeros(0, np.int64)
#: The part name of a job on one process of generation 0: the output folder.
ROOT = "."


def _counted(values: Any) -> str:
    values = list(values)
    more = f" (and {len(values) - _SHOWN} more)" if len(values) > _SHOWN else ""
    return ", ".join(str(v) for v in values[:_SHOWN]) + more


def _name(output: Path, path: Path) -> str:
    return ROOT if path == output else path.name


# -- Where a process writes ---------------------------------------------------------


@dataclasses.dataclass
class Place:
    """Where a process of a job writes, and for generation >= 1 what it
    continues: the job record's ``continues``, the remaining examples (in
    example order: the view the generation plans) and the planner record of
    the job it continues (the planner every generation runs)."""

    folder: Path
    generation: int
    continues: dict[str, Any] | None = None
    remaining: np.ndarray | None = None
    planner: dict[str, Any] | None = None


def place(
    output: Path,
    index: int,
    count: int,
    *,
    elastic: bool,
    same_job: Any,
    total: int,
    who: str = "jb.run",
) -> Place:
    """Where process (`index`, `count`) writes its part of the job in
    `output`. Without `elastic`, a folder holding parts run on another count
    (or a continuation) is refused, naming elastic. With it: the latest
    generation if it has this count, else a new one continuing every
    earlier part. ``same_job(record)`` gives the differences between an
    earlier part's job record and this call's (the shard aside); `total`
    is the job's example count."""
    parts = process_parts(output)
    if not elastic:
        _refuse_other_counts(output, parts, count, who)
        return Place(process_folder(output, index, count), 0)
    generation = _generation(output, parts, count, who)
    if generation == 0:
        return Place(process_folder(output, index, count), 0)
    earlier = sorted((k, p) for k, p in parts.items() if k[0] < generation)
    taken = [_take(output, path, same_job, who) for _, path in earlier]
    remaining = _remaining(output, taken, total, who)
    continues = {
        "generation": generation,
        "parts": [t.record for t in taken],
        "remaining": len(remaining),
        "remaining_hash": _hash(remaining),
    }
    here = Place(process_folder(output, index, count, generation), generation, continues)
    here.remaining = remaining
    here.planner = next((t.planner for t in taken if t.planner is not None), None)
    for (g, i, _), path in parts.items():  # The generation's other parts agree.
        if g == generation and i != index:
            _check_continues(path, continues, who)
    return here


def _refuse_other_counts(output: Path, parts: dict, count: int, who: str) -> None:
    other = sorted({(g, c) for g, _, c in parts if g > 0 or c != count})
    if other:
        counts = sorted({c for _, c in other})
        continued = any(g > 0 for g, _ in other)
        raise JobError(
            f"{who}: {output} holds parts of a job run on {_counted(counts)} process(es)"
            + (" and continued elastically" if continued else "")
            + f"; this call runs on {count}. Pass elastic=True (--elastic) to continue that job "
            f"on {count} processes (they take what its parts committed as done and share the "
            f"rest), or choose another output folder"
        )


def _generation(output: Path, parts: dict, count: int, who: str) -> int:
    """The generation process count `count` writes: the latest if it has
    this count (0 for a new job), else the next."""
    if not parts:
        return 0
    counts: dict[int, set[int]] = {}
    for g, _, c in parts:
        counts.setdefault(g, set()).add(c)
    latest = max(counts)
    if len(counts[latest]) > 1:
        raise JobError(
            f"{who}: {output} holds parts of generation {latest} run on "
            f"{sorted(counts[latest])} processes; a generation has one process count, so this "
            f"chain cannot be continued: move the parts that do not belong away"
        )
    return latest if counts[latest] == {count} else latest + 1


@dataclasses.dataclass
class _Taken:
    record: dict[str, Any]  # continues["parts"]'s entry
    examples: np.ndarray  # the examples taken as done
    planner: dict[str, Any] | None


def _take(output: Path, path: Path, same_job: Any, who: str) -> _Taken:
    """What an earlier part committed: its leading run of whole shards."""
    name = _name(output, path)
    if not os.path.lexists(path / JOURNAL_NAME):
        return _Taken({"part": name, "shards": 0, "recorded": 0, "examples": 0}, _NO_EXAMPLES, None)
    with Journal(path / JOURNAL_NAME, write=False, who=who) as journal:
        if journal.core.foreign:
            raise JobError(
                f"{who}: {path / JOURNAL_NAME} is not a jaxbatch journal; cannot continue it"
            )
        records = journal.records
    job = records[0] if records and records[0]["kind"] == "job" else None
    if job is None:
        return _Taken({"part": name, "shards": 0, "recorded": 0, "examples": 0}, _NO_EXAMPLES, None)
    differences = same_job(job)
    if differences:
        raise JobError(
            f"{who}: elastic=True continues the same job only, but {path} holds one with a "
            f"different setting:\n  "
            + "\n  ".join(differences)
            + "\nre-run with the original settings, or choose another output folder"
        )
    folder = JobFolder(path, who)
    shards = [r for r in records if r["kind"] == "shard"]
    done = []  # Shard by shard: a part's bytes are never all held at once.
    for r in shards:
        data, problem = folder.shard_problem(r)
        if problem is not None:
            log.warning(
                "%s: %s is %s; its examples and those of the shards after it are redone by "
                "the new processes (the file stays as it is)",
                who,
                path / r["file"],
                problem,
            )
            break
        done.append(_done_examples(data, r))
    examples = np.concatenate([_NO_EXAMPLES, *done])
    record = {"part": name, "shards": len(done), "recorded": len(shards), "examples": len(examples)}
    return _Taken(record, examples, job.get("planner"))


def _done_examples(data: bytes, record: dict[str, Any]) -> np.ndarray:
    """The examples a shard holds: written, or set aside by the function."""
    written = example_indices(read_shards([data], key_only=True)).astype(np.int64)
    bad = np.fromiter((b["example"] for b in record["bad"]), np.int64)
    return np.concatenate([written, bad])


def _remaining(output: Path, taken: list[_Taken], total: int, who: str) -> np.ndarray:
    """The examples no earlier part took, in example order; an example
    taken twice (parts that do not continue each other) is refused."""
    done = np.concatenate([_NO_EXAMPLES, *(t.examples for t in taken)])
    outside = done[(done < 0) | (done >= total)]
    if len(outside):
        raise JobError(
            f"{who}: {output}'s parts hold example {int(outside[0])}, outside the job's "
            f"{total} examples: they are not parts of this job"
        )
    seen = np.bincount(done, minlength=total)
    twice = np.flatnonzero(seen > 1)
    if len(twice):
        example = int(twice[0])
        holding = [t.record["part"] for t in taken if (t.examples == example).any()]
        raise JobError(
            f"{who}: {output} holds example {example} in more than one part ({_counted(holding)}"
            f"; {len(twice)} such examples): its parts do not continue each other, so the job "
            f"cannot be continued from them"
        )
    return np.flatnonzero(seen == 0).astype(np.int64)


def _hash(examples: np.ndarray) -> str:
    return f"{_core.hash_file_contents(examples.astype('<i8').tobytes()):016x}"


def _job_record(path: Path) -> dict[str, Any] | None:
    """The job record of the part in `path`, read-only; None if it has none."""
    if not os.path.lexists(path / JOURNAL_NAME):
        return None
    with Journal(path / JOURNAL_NAME, write=False) as journal:
        records = journal.records
    return records[0] if records and records[0]["kind"] == "job" else None


def _check_continues(path: Path, continues: dict[str, Any], who: str) -> None:
    """Refuses to join a generation whose part in `path` continued other
    parts (or the same parts as they were then: they changed since)."""
    job = _job_record(path)
    if job is not None and job.get("continues") != continues:
        raise JobError(
            f"{who}: {path.name} continued {_summary(job.get('continues'))}, but this process "
            f"finds {_summary(continues)}: the earlier parts changed since that generation "
            f"began (a part run again, or a shard damaged), so its processes would not share "
            f"one plan; move that generation's parts away to continue anew"
        )


def differs_from_recorded(journal_records: list[dict[str, Any]], here: Place) -> bool:
    """Whether a part's own journal continues other than `here` does."""
    return bool(journal_records) and journal_records[0].get("continues") != here.continues


def _summary(continues: dict[str, Any] | None) -> str:
    if not continues:
        return "nothing (a job's first generation)"
    parts = ", ".join(
        f"{p['part']}: {p['shards']} of {p['recorded']} shards" for p in continues["parts"]
    )
    left = continues["remaining"]
    return f"generation {continues['generation'] - 1} and before ({parts}; {left} examples left)"


# -- Reading the chain ----------------------------------------------------------------


@dataclasses.dataclass
class Chain:
    """A job's parts as a reader takes them: every part with what to read
    of it (an earlier part: the shards the latest generation took, as
    committed and done), the latest generation's parts (whose completion
    counts) and the latest generation's ``continues`` (None for one
    generation)."""

    parts: list[tuple[Path, Committed]]
    latest: list[tuple[Path, Committed]]
    continues: dict[str, Any] | None


def read_chain(output: Path, partial: bool) -> Chain:
    """The parts of the job in `output`, read-only; refuses, naming them,
    parts of several counts that no continuation joins, missing processes
    (unless `partial`) and a chain that does not hold together."""
    parts = process_parts(output) if output.is_dir() else {}
    if not parts:
        part = read_committed(output)  # Reports there is no job here.
        return Chain([(output, part)], [(output, part)], None)
    latest_generation = max(g for g, _, _ in parts)
    counts = sorted({c for g, _, c in parts if g == latest_generation})
    if len(counts) > 1:
        raise ValueError(
            f"jb.read_output: {output} holds parts of jobs run on {counts} processes"
            + (f" in generation {latest_generation}" if latest_generation else "")
            + "; expected one count (jb.run(..., elastic=True) continues a job on another "
            "count as a new generation of parts)"
        )
    count = counts[0]
    latest_parts = {i: p for (g, i, c), p in parts.items() if g == latest_generation}
    missing = [i for i in range(count) if i not in latest_parts]
    if missing and not partial:
        where = f" (generation {latest_generation})" if latest_generation else ""
        raise ValueError(
            f"jb.read_output: {output} is a job on {count} processes{where}, but the parts of "
            f"processes {missing} are missing; run them, or pass partial=True"
        )
    latest = [(latest_parts[i], read_committed(latest_parts[i])) for i in sorted(latest_parts)]
    if latest_generation == 0:
        return Chain(latest, latest, None)
    continues = _agreed_continuation(output, latest)
    earlier = {_name(output, p): p for (g, _, _), p in parts.items() if g < latest_generation}
    return Chain([*_taken_parts(output, earlier, continues), *latest], latest, continues)


def _agreed_continuation(output: Path, latest: list[tuple[Path, Committed]]) -> dict[str, Any]:
    """The ``continues`` every part of the latest generation records."""
    recorded = [(p, c.job.get("continues")) for p, c in latest if c.job is not None]
    if not recorded:
        raise ValueError(f"jb.read_output: {output}'s latest generation holds no job record yet")
    first_path, first = recorded[0]
    for path, other in recorded[1:]:
        if other != first:
            raise ValueError(
                f"jb.read_output: {output}: {path.name} continued {_summary(other)}, "
                f"{first_path.name} {_summary(first)}: parts of one generation that continue "
                f"different things do not make one job"
            )
    if first is None:
        raise ValueError(
            f"jb.read_output: {output}: {first_path.name} is named as a continuation but its "
            f"job record does not say what it continues"
        )
    return first


def _taken_parts(output: Path, earlier: dict[str, Path], continues: dict[str, Any]) -> list:
    """The earlier parts as the latest generation took them: the shards
    taken, verified, and nothing after them."""
    listed = {p["part"]: p for p in continues["parts"]}
    unlisted = sorted(set(earlier) - set(listed))
    if unlisted:
        raise ValueError(
            f"jb.read_output: {output}: {_counted(unlisted)} of an earlier generation "
            f"{'is' if len(unlisted) == 1 else 'are'} not among the parts generation "
            f"{continues['generation']} continues (made after it began): the parts do not "
            f"continue each other; move {'it' if len(unlisted) == 1 else 'them'} away"
        )
    out = []
    for name, taken in listed.items():
        path = earlier.get(name)
        if path is None:
            if taken["recorded"]:
                raise OSError(
                    f"jb.read_output: {output}/{name}, an earlier part generation "
                    f"{continues['generation']} continues, is missing"
                )
            continue
        out.append((path, _read_taken(path, taken, continues["generation"])))
    return out


def _read_taken(path: Path, taken: dict[str, Any], generation: int) -> Committed:
    """The first ``taken["shards"]`` shards of the earlier part in `path`,
    verified; its journal must hold the shard records it held when taken."""
    with Journal(path / JOURNAL_NAME, write=False) as journal:
        records = journal.records
    shards = [r for r in records if r["kind"] == "shard"]
    if len(shards) != taken["recorded"]:
        raise ValueError(
            f"jb.read_output: {path} holds {len(shards)} shard records, but generation "
            f"{generation} continued it when it held {taken['recorded']}: it was run again "
            f"since, so the parts do not continue each other"
        )
    folder = JobFolder(path, "jb.read_output")
    read = []
    for i, record in enumerate(shards[: taken["shards"]]):
        data, problem = folder.shard_problem(record)
        if problem is not None:
            raise OSError(
                f"{path / record['file']} (shard {i} of an earlier part, taken as done by "
                f"generation {generation}) is {problem}: the job's output is damaged"
            )
        read.append(Shard(record, data))
    job = records[0] if records and records[0]["kind"] == "job" else None
    return Committed(job, read, True, False)


def check_covered(output: Path, chain: Chain, written: np.ndarray, total: int) -> None:
    """Refuses a finished chain in which an example is in no part, beyond
    the skips the latest generation's loaders counted (not recorded one by
    one), or set aside and written, or set aside twice."""
    bad = [b["example"] for _, c in chain.parts for s in c.shards for b in s.record["bad"]]
    done = [c for _, c in chain.latest]
    # A loader checks its whole input's records (the view, for a continued
    # job) before it shards the plan, so every part of a generation records
    # the same quarantine and skip count: each is taken once.
    quarantined = np.unique(
        np.fromiter(
            (q["example"] for c in done for q in c.done_record.get("loader_quarantine", [])),
            np.int64,
        )
    )
    skipped = max((c.done_record.get("loader_skipped", 0) for c in done), default=0)
    handled = np.concatenate([written, np.asarray(bad, np.int64), quarantined])
    seen = np.bincount(handled[(handled >= 0) & (handled < total)], minlength=total)
    twice = np.flatnonzero(seen > 1)
    if len(twice):
        raise ValueError(
            f"jb.read_output: {output} holds example {int(twice[0])} more than once (written "
            f"or set aside; {len(twice)} such examples): its parts do not continue each other"
        )
    missing = np.flatnonzero(seen == 0)
    if len(missing) > skipped:
        raise ValueError(
            f"jb.read_output: {output}'s chain of parts lacks examples {_counted(missing)} "
            f"({len(missing)} in all, {skipped} skipped by the loaders): the parts do not "
            f"continue each other"
        )

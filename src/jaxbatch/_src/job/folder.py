"""A job's folder: the names of what a job keeps there, which files are its
own, and opening it to write (claiming, checking and repairing it) or to read
(changing nothing).

A job owns only what it wrote and recorded: its journal, its report, and the
shards its journal names (a job run in work units names them all in its first
record: ``units``, shard u being unit u's output). Each shard is named in a
``writing`` record before the file is written and in a ``shard`` record once
it is whole, so a crash between any two steps still leaves every file the job
made named by a record. Anything else in the folder is someone else's: a
writer refuses such a folder, naming the first foreign file, and never deletes
or overwrites it.
A name is not enough: a file named like one of the job's is the job's only
if its content is what the job writes there (a journal begins with a record
marker, a shard and its temporaries with Parquet's magic bytes, the report
is the job's JSON), checked before anything is cut, deleted or replaced,
``overwrite=True`` included. The job's lock is the journal's own (flock):
there is no lock file.
A reader opens everything read-only, never follows a symbolic link to a file
the job owns, and reports damage instead of repairing it; only a writer,
holding the journal's lock, repairs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import socket
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jaxbatch import _core

log = logging.getLogger("jaxbatch")

JOURNAL_NAME = "journal.jbj"
REPORT_NAME = "report.json"
# How every shard begins (Parquet's magic bytes), and the report (a JSON object).
_PARQUET_MAGIC = b"PAR1"
_REPORT_START = b"{"
# Keys every report of a job has had (JobReport's fields).
_REPORT_KEYS = frozenset({"output", "complete", "total", "examples", "shards", "runs"})
_SHARD_NAME = re.compile(r"part-(\d{6})\.parquet")
_PROCESS_NAME = re.compile(r"process-(\d{5})-of-(\d{5})(?:-generation-([1-9]\d{0,8}))?")
# Foreign files named in one refusal.
_SHOWN = 3
_NOT_A_JOURNAL = (
    "does not begin with a jaxbatch journal's record marker: no jaxbatch job wrote it (or its "
    "first bytes are damaged)"
)


class JobError(ValueError):
    """A job that cannot start or resume as asked (a folder holding other
    files, another job's folder, changed function, input or options)."""


# -- Names: made and read here only ------------------------------------------
# Process folders are named ``process-IIIII-of-NNNNN``, zero-padded so they
# sort in process order; a loader state in a checkpoint is named as Grain
# names its iterators' (``process_<i>-of-<n>.json``, integrations/orbax.py), so
# it sits where Orbax users look for one. Both are in folders users already
# have: renaming either would orphan them, so each rule stays with its owner.
# A job continued on another number of processes (jb.run(elastic=True),
# job/chain.py) writes generation g >= 1 beside them, as
# ``process-IIIII-of-NNNNN-generation-G``: a count may come back (4, 3, 4)
# without its folders meeting the first generation's.


def shard_name(number: int) -> str:
    """The file of a job's shard `number`."""
    return f"part-{number:06d}.parquet"


def process_folder(output: Path, index: int, count: int, generation: int = 0) -> Path:
    """Where process ``index`` of ``count`` keeps its part of a job: the
    output folder itself for a job on one process, of generation 0."""
    if generation == 0:
        return output if count == 1 else output / f"process-{index:05d}-of-{count:05d}"
    return output / f"process-{index:05d}-of-{count:05d}-generation-{generation}"


def report_path(folder: Path) -> Path:
    """The report of the job (or of one process's part) kept in `folder`."""
    return folder / REPORT_NAME


def process_parts(output: Path) -> dict[tuple[int, int, int], Path]:
    """The process folders in ``output``, by (generation, index, count);
    a job on one process of generation 0 is ``output`` itself, (0, 0, 1)."""
    parts = {}
    if os.path.lexists(output / JOURNAL_NAME):
        parts[0, 0, 1] = output
    if not output.is_dir():
        return parts
    for p in output.iterdir():
        m = _PROCESS_NAME.fullmatch(p.name)
        if m and p.is_dir() and not p.is_symlink():
            parts[int(m[3] or 0), int(m[1]), int(m[2])] = p
    return parts


# -- The journal, decoded ------------------------------------------------------


class Journal:
    """A job's journal (the C++ ``Journal``) with its records decoded. For
    writing it holds the job's lock until closed; for reading it changes
    nothing and takes no lock."""

    def __init__(self, path: Path, *, write: bool, who: str = "jb.run"):
        access = _core.JournalAccess.write if write else _core.JournalAccess.read
        self.who = who  # The call its messages name (jb.run, jb.tokenize).
        self.core = _core.Journal(str(path), access)
        # The damage this run cut from the journal (repair_note), for its report.
        self.repairs: list[dict[str, Any]] = []
        try:
            if write and self.core.foreign:  # A reader reports it as damage.
                raise JobError(
                    f"{who}: {path} {_NOT_A_JOURNAL}, and a job never changes a file it did "
                    f"not write, even with overwrite=True: move it away or choose another "
                    f"output folder"
                )
            self.records = [_decode(r, path, i) for i, r in enumerate(self.core.records())]
            self.salvaged = []
            for r in self.core.salvaged():  # Damaged surroundings: keep what decodes.
                try:
                    self.salvaged.append(_decode(r, path, -1))
                except JobError:
                    continue
        except BaseException:
            self.core.close()
            raise

    @property
    def damage(self):
        return self.core.damage

    def append(self, record: dict[str, Any]) -> None:
        self.core.append(json.dumps(record, sort_keys=True, separators=(",", ":")).encode())
        self.records.append(record)

    def truncate(self, count: int) -> None:
        self.core.truncate(count)
        del self.records[count:]

    def close(self) -> None:
        self.core.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _decode(payload: bytes, path: Path, index: int) -> dict[str, Any]:
    """A record as the job wrote it: a JSON object with a ``kind``; a file it
    names is a shard name of this job's (never a path), so that a crafted
    journal cannot make a writer delete or read anything else."""
    try:
        record = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        raise JobError(f"{path}: record {index} is not a jaxbatch job record")
    name = record.get("file")
    if "file" in record and not (isinstance(name, str) and _SHARD_NAME.fullmatch(name)):
        raise JobError(
            f"{path}: record {index} names the file {name!r}; a job's records name only its "
            f"shards (part-NNNNNN.parquet)"
        )
    return record


def _unit_file(name: str, units: int) -> str | None:
    """The shard of unit < `units` that `name` is, or is a temporary of."""
    m = _SHARD_NAME.search(name)
    if m is None or int(m[1]) >= units:
        return None
    if name == m[0] or name.startswith(_core.atomic_temp_prefix(m[0])):
        return m[0]
    return None


def _named_files(records: Iterable[dict[str, Any]]) -> set[str]:
    return {r["file"] for r in records if "file" in r}


def repair_note(journal: Journal) -> None:
    """Logs the damage a writer is about to cut from `journal` and notes it
    in journal.repairs, as the report keeps it (JobReport.repairs)."""
    damage = journal.damage
    dropped = 1 + damage.intact_after
    log.warning(
        "%s: %s is damaged at byte %d (record %d: %s); cutting it there drops %d "
        "record%s; the work they recorded is redone",
        journal.who,
        journal.core.path,
        damage.offset,
        damage.record,
        damage.reason,
        dropped,
        "" if dropped == 1 else "s",
    )
    journal.repairs.append(
        {
            "byte": damage.offset,
            "record": damage.record,
            "reason": damage.reason,
            "dropped": dropped,
        }
    )


# -- What the folder holds -----------------------------------------------------


@dataclasses.dataclass
class Shard:
    """A committed shard: its journal record and, once read, its bytes."""

    record: dict[str, Any]
    data: bytes | None = None


class JobFolder:
    """A job's folder: ``output`` for a job on one process, else one
    process's ``process-IIIII-of-NNNNN`` folder."""

    def __init__(self, path: Path, who: str = "jb.run"):
        self.path = path
        self.who = who  # The call its messages name (jb.run, jb.tokenize).

    def owned(self, journal: Journal) -> set[str]:
        """Names of the files this folder's job owns: its journal, its report
        and every shard a record names (the damaged tail's records included).
        A job of format 1 named a shard only once it was written: there every
        shard-named file is the job's, as that format had it."""
        owned = {JOURNAL_NAME, REPORT_NAME} | _named_files([*journal.records, *journal.salvaged])
        job = journal.records[0] if journal.records else {}
        if job.get("kind") == "job" and job.get("fingerprint", {}).get("format") == 1:
            owned |= {p.name for p in self.path.iterdir() if _SHARD_NAME.fullmatch(p.name)}
        units = job.get("units") if job.get("kind") == "job" else None
        if isinstance(units, int) and not isinstance(units, bool):
            # A job run in work units (jaxbatch.ray.run) names all its shards
            # up front: unit u's output is shard u's file, whoever writes it,
            # and so is a temporary a worker left writing it.
            owned |= {name for p in self.path.iterdir() if (name := _unit_file(p.name, units))}
        return owned

    def foreign(self, owned: set[str]) -> list[str]:
        """Entries of the folder that are not the job's (nor temporaries of its files)."""
        temporaries = set(self.temporaries(owned))
        return sorted(
            p.name for p in self.path.iterdir() if p.name not in owned and p.name not in temporaries
        )

    def temporaries(self, owned: set[str]) -> list[str]:
        """Leftover temporaries of the job's atomic writes of its files."""
        prefixes = tuple(_core.atomic_temp_prefix(n) for n in owned if n != JOURNAL_NAME)
        if not prefixes:
            return []
        return [p.name for p in self.path.iterdir() if p.name.startswith(prefixes)]

    def content_problem(self, name: str) -> str | None:
        """Why the file `name` (one of the job's names, or a temporary of
        one) is not the job's by its content: None when it is, or is gone.
        The journal is checked when it opens (Journal.core.foreign); a shard
        whose hash differs from its record's is the job's, damaged, and is
        redone (shard_problem)."""
        path = self.path / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            return "is not a regular file (a FIFO, a device, a socket or a folder)"
        if stat.S_ISREG(st.st_mode) and st.st_size == 0:
            return None  # An empty file holds nothing to lose (a write that never began).
        if name == REPORT_NAME:
            return _report_problem(path)
        start = _REPORT_START if name.startswith(f".{REPORT_NAME}.") else _PARQUET_MAGIC
        try:
            head = _leading_bytes(path, len(start))
        except OSError as e:
            return f"cannot be read without following a link ({e.strerror})"
        temporary = name.startswith(".")  # A write cut short holds a prefix of the file.
        if head == start or (temporary and start.startswith(head)):
            return None
        what = "a job's report" if start == _REPORT_START else "Parquet"
        return f"does not begin as {what} does ({start!r}), as every file the job writes there"

    def refuse_not_owned(self, names: Iterable[str]) -> None:
        """Refuses, naming them, those of `names` (the job's own names and
        their temporaries) that hold something the job did not write."""
        problems = [(n, p) for n in sorted(names) if (p := self.content_problem(n)) is not None]
        if problems:
            shown = "; ".join(f"{self.path / n} {p}" for n, p in problems[:_SHOWN])
            more = f" (and {len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else ""
            raise JobError(
                f"{self.who}: {shown}{more}: named like the job's files, but the job did not write "
                f"them. A job never deletes or replaces a file it did not write, even with "
                f"overwrite=True: move them away or choose another output folder"
            )

    def write_report(self, report: dict[str, Any]) -> Path:
        """Writes the job's report (atomically), unless a file put in its
        place meanwhile is not the job's; returns where."""
        self.refuse_not_owned([REPORT_NAME])
        path = report_path(self.path)
        _core.write_file_atomic(str(path), json.dumps(report, indent=1).encode())
        return path

    def refuse_foreign(self, foreign: list[str], why: str) -> None:
        if foreign:
            more = f" and {len(foreign) - _SHOWN} more" if len(foreign) > _SHOWN else ""
            shown = ", ".join(map(repr, foreign[:_SHOWN]))
            raise JobError(
                f"{self.who}: output folder {self.path} holds {shown}{more}, which {why}; a "
                f"job writes only in an empty or new folder, or in its own: choose another "
                f"output folder"
            )

    def shard_problem(self, record: dict[str, Any]) -> tuple[bytes | None, str | None]:
        """The shard's bytes as read (never through a link), or what is wrong
        with it: missing, another size, another hash."""
        path = self.path / record["file"]
        if not os.path.lexists(path):
            return None, "missing"
        data = _core.read_owned_file(str(path))  # OSError for a link or non-file.
        if len(data) != record["bytes"]:
            return (
                None,
                f"{len(data)} bytes, not the {record['bytes']} recorded (truncated or torn)",
            )
        if f"{_core.hash_file_contents(data):016x}" != record["hash"]:
            return None, "corrupt (its hash differs from the one recorded)"
        return data, None

    def remove(self, names: Iterable[str]) -> int:
        """Deletes those of the job's own files that exist; their count. Each
        is checked by its content first (refuse_not_owned): a file put in
        place of one of the job's since it was claimed is refused, not deleted."""
        names = list(names)
        self.refuse_not_owned(names)
        removed = 0
        for name in names:
            path = self.path / name
            if os.path.lexists(path):
                path.unlink()
                removed += 1
        if removed:
            _core.sync_directory(str(self.path))
        return removed


def _leading_bytes(path: Path, count: int) -> bytes:
    """The first `count` bytes of the file at `path`, never through a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        return os.read(fd, count)
    finally:
        os.close(fd)


def _report_problem(path: Path) -> str | None:
    """Why `path` is not a report a job wrote (JSON with JobReport's keys)."""
    try:
        report = json.loads(_core.read_owned_file(str(path)))
    except OSError as e:
        return f"cannot be read as the job's report ({e})"
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "is not JSON, as every report a job writes is"
    if not isinstance(report, dict) or not _REPORT_KEYS <= report.keys():
        return f"is not a job's report (a JSON object with the keys {sorted(_REPORT_KEYS)})"
    return None


# -- Writing ------------------------------------------------------------------


def claim(
    path: Path, *, overwrite: bool, inputs: Iterable[str], who: str = "jb.run"
) -> tuple[JobFolder, Journal]:
    """Opens the job folder at `path` for writing: creates it, or takes the
    journal of the job already there (and its lock). Refuses a folder that
    holds anything the job did not write, and an input that lies inside it.
    ``overwrite`` deletes the old job's own files first. Messages name
    `who`, the call the user wrote."""
    _check_output_path(path, who)
    _check_inputs(path, inputs, who)
    path.mkdir(parents=True, exist_ok=True)
    folder = JobFolder(path, who)
    journal_path = path / JOURNAL_NAME
    if not os.path.lexists(journal_path):
        folder.refuse_foreign(folder.foreign(set()), "no jaxbatch job wrote (it has no journal)")
    journal = Journal(journal_path, write=True, who=who)  # JobError for a file no job wrote.
    try:
        if journal.records and journal.records[0].get("kind") != "job":
            raise JobError(f"{who}: {journal_path} does not start with a job record")
        owned = folder.owned(journal)
        folder.refuse_foreign(folder.foreign(owned), "the job in it did not write")
        for name in owned - {JOURNAL_NAME}:
            if (path / name).is_symlink():
                raise JobError(
                    f"{who}: {path / name} is a symbolic link; a job's files are regular "
                    f"files it wrote itself: remove the link (the job then redoes that part)"
                )
        folder.refuse_not_owned((owned - {JOURNAL_NAME}) | set(folder.temporaries(owned)))
        if overwrite:
            start_over(folder, journal)
        elif not journal.records and journal.core.needs_repair:
            # The first record cut short (a crash or a full disk during the
            # job's first append): no job is keyed yet, so it starts afresh.
            repair_note(journal)
            start_over(folder, journal)
    except BaseException:
        journal.close()
        raise
    return folder, journal


def append_start(journal: Journal, **fields: Any) -> None:
    """Appends a run's ``start`` record: when and where (host, process) it
    ran, the journal damage it repaired, and `fields` (where it resumed)."""
    journal.append(
        {
            "kind": "start",
            "time": time.time(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            **fields,
            "repaired": journal.repairs,
        }
    )


def begin_run(folder: JobFolder, journal: Journal, **fields: Any) -> tuple[list[dict], bool]:
    """:func:`settle`, then, for a job not yet complete, this run's start
    record (:func:`append_start` with `fields`), resumed at the examples the
    kept shards hold. Returns the kept shard records and whether the job is
    complete. jb.run's and jaxbatch.ray.run's start."""
    shards, done, redone = settle(folder, journal)
    if not done:
        resumed_at = sum(s["examples"] for s in shards)
        append_start(journal, **fields, resumed_at=resumed_at, redone=redone)
    return shards, done


def committed_any(journal: Journal) -> bool:
    """Whether the job recorded any work: a shard, or its completion."""
    return any(r["kind"] in ("shard", "done") for r in [*journal.records, *journal.salvaged])


def reconcile(folder: JobFolder, journal: Journal, differences: list[str], what: str) -> None:
    """Takes the job in `folder` for this call, whose key differs from the
    recorded one by `differences` (the runner's own comparison; empty for
    the same job, or a new folder): the same job resumes; a different one
    is refused with a JobError listing them (`what` names what may differ),
    unless it committed nothing (a run that failed while planning, say):
    nothing is locked in, so the new settings start the job afresh."""
    if not differences:
        return
    if not committed_any(journal):
        log.info("%s: %s holds no committed work; starting anew", folder.who, folder.path)
        start_over(folder, journal)
        return
    raise JobError(
        f"{folder.who}: {folder.path} holds a job with a different "
        + (what if len(differences) > 1 else "setting")
        + ":\n  "
        + "\n  ".join(differences)
        + "\nre-run with the original settings to resume it, choose another output folder, "
        "or pass overwrite=True (--overwrite) to start over"
    )


def run_totals(journal: Journal) -> tuple[int, int, list[dict[str, Any]]]:
    """How many runs the job took, the shards they redid and the journal
    damage they repaired, read from their start records (append_start)."""
    starts = [r for r in journal.records if r.get("kind") == "start"]
    repairs = [note for r in starts for note in r.get("repaired", [])]
    return len(starts), sum(r.get("redone", 0) for r in starts), repairs


def start_over(folder: JobFolder, journal: Journal) -> None:
    """Deletes every file of the job's but its journal, then empties the journal."""
    owned = folder.owned(journal)
    folder.remove((owned - {JOURNAL_NAME}) | set(folder.temporaries(owned)))
    journal.truncate(0)


def settle(folder: JobFolder, journal: Journal) -> tuple[list[dict], bool, int]:
    """Brings the folder to its last good commit: verifies the shards the
    journal lists, keeps the longest run of whole ones, deletes the job's
    other files (a damaged shard and everything after it, shards written but
    not recorded, temporaries) and then cuts the journal to match, repairing
    a damaged tail. Returns the kept shard records, whether the job is
    complete, and how many recorded shards are redone."""
    keep, shards, done = len(journal.records), [], False
    for i, record in enumerate(journal.records):
        if record["kind"] == "done":
            done = True
            break
        if record["kind"] != "shard":
            continue
        _, problem = folder.shard_problem(record)
        if problem is not None:
            log.warning(
                "%s: shard %s is %s; redoing it and what follows",
                folder.who,
                record["file"],
                problem,
            )
            keep = i
            break
        shards.append(record)
    if journal.damage.damaged and journal.core.needs_repair:
        repair_note(journal)
    recorded = sum(r["kind"] == "shard" for r in [*journal.records, *journal.salvaged])
    owned = folder.owned(journal)
    kept = _named_files(shards) | {JOURNAL_NAME, REPORT_NAME}
    folder.remove((owned - kept) | set(folder.temporaries(owned)))  # While still named.
    if keep < len(journal.records) or journal.core.needs_repair:
        journal.truncate(keep)
    return shards, done, recorded - len(shards)


def shard_record(number: int, data: bytes, **fields: Any) -> dict[str, Any]:
    """The ``shard`` record that commits `data` as the job's shard `number`:
    the file's name and what checks it (its size and hash: shard_problem),
    then `fields`, what the runner records of the shard's work."""
    return {
        "kind": "shard",
        "shard": number,
        "file": shard_name(number),
        "bytes": len(data),
        "hash": f"{_core.hash_file_contents(data):016x}",
        **fields,
    }


def write_shard(folder: JobFolder, journal: Journal, number: int, data: bytes) -> dict[str, Any]:
    """Writes `data` as the job's shard `number`, atomically, and returns the
    start of its ``shard`` record (shard_record); the caller appends the
    record, with what the shard holds, as its commit. The shard is named in
    a ``writing`` record before it exists, so a crash after the write but
    before the commit still leaves the file recognisably the job's; a file
    put at its name since the job settled is refused, not replaced. (A job
    run in work units names its shards up front instead: jaxbatch.ray.)"""
    name = shard_name(number)
    journal.append({"kind": "writing", "shard": number, "file": name})
    if os.path.lexists(folder.path / name):
        folder.refuse_foreign([name], "the job did not write")
    _core.write_file_atomic(str(folder.path / name), data)
    return shard_record(number, data)


def _check_output_path(path: Path, who: str) -> None:
    if path.is_symlink() and not path.exists():
        raise JobError(
            f"{who}: output {path} is a symbolic link to {os.readlink(path)}, which does not "
            f"exist; point it at a folder or choose another output"
        )
    if path.exists() and not path.is_dir():
        raise JobError(f"{who}: output {path} is a file; expected a folder")


def _check_inputs(path: Path, inputs: Iterable[str], who: str) -> None:
    """Refuses an input file (or folder) inside the job's folder, or the folder itself."""
    folder = path.resolve()
    for source in inputs:
        resolved = Path(source).resolve()
        if resolved == folder or folder in resolved.parents:
            raise JobError(
                f"{who}: the input {source} lies inside the job's output folder {path}; a job's "
                f"folder holds only the job's own files: choose another output folder"
            )


# -- Reading ------------------------------------------------------------------


@dataclasses.dataclass
class Committed:
    """What a reader finds in a job folder: the job record, the committed
    shards (verified, with their bytes) and whether the job finished."""

    job: dict[str, Any] | None
    shards: list[Shard]
    done: bool
    interrupted: bool  # the journal ends in a torn record: a run stopped (or runs now)
    #: The ``done`` record (the loader's skips and quarantine); empty if unfinished.
    done_record: dict[str, Any] = dataclasses.field(default_factory=dict)


def read_committed(path: Path) -> Committed:
    """The committed work of the job in `path`, read-only. Raises OSError for
    damage (a corrupt journal record, a shard that is missing, a link, of
    another size or hash), naming the record or shard, and JobError when
    there is no job."""
    if not os.path.lexists(path / JOURNAL_NAME):
        raise JobError(f"{path} holds no jaxbatch job (no {JOURNAL_NAME})")
    folder = JobFolder(path)
    with Journal(path / JOURNAL_NAME, write=False) as journal:
        records, damage = journal.records, journal.damage
        done = any(r["kind"] == "done" for r in records)
        if damage.damaged and (done or not damage.torn_tail):
            raise OSError(_damage_message(journal))
        shards = []
        for i, record in enumerate(records):
            if record["kind"] != "shard":
                continue
            data, problem = folder.shard_problem(record)
            if problem is not None:
                raise OSError(
                    f"{path / record['file']} (shard {record['shard']}, journal record {i}) is "
                    f"{problem}: the job's output is damaged; re-run the job to redo that shard "
                    f"and those after it (its journal is left as it is: reading never repairs)"
                )
            shards.append(Shard(record, data))
    job = records[0] if records and records[0]["kind"] == "job" else None
    finished = next((r for r in records if r["kind"] == "done"), {})
    return Committed(job, shards, done, damage.damaged, finished)


def _damage_message(journal: Journal) -> str:
    damage, records = journal.damage, journal.records
    last = next((r for r in reversed(records) if r["kind"] == "shard"), None)
    after = f"after the record of shard {last['shard']}" if last else "before any shard's record"
    lost = [f"shard {r['shard']}" for r in journal.salvaged if r["kind"] == "shard"]
    if any(r["kind"] == "done" for r in journal.salvaged):
        lost.append("the job's completion")
    follows = (
        f"; {damage.intact_after} intact record(s) follow it ({', '.join(lost) or 'no shards'})"
        if damage.intact_after
        else ""
    )
    if journal.core.foreign:
        advice = f"It {_NOT_A_JOURNAL}: a job refuses to change it; move it away to run anew"
    else:
        advice = "Reading never repairs: re-run the job to cut the damaged records and redo "
        advice += "the shards they recorded"
    return (
        f"{journal.core.path} is damaged at byte {damage.offset}, record {damage.record} "
        f"({after}): {damage.reason}{follows}. {advice}"
    )

"""A loader's state files in a checkpoint: one JSON file per saving
process, named as Grain names its iterators' (``process_<i>-of-<n>.json``),
so a state sits where Orbax and Grain users look for one. The naming rule is
written and read here only; Orbax's handler (integrations/orbax.py) and the
Grain checkpoint's elastic restore (integrations/grain_checkpoint.py) both
read states through it. Pure file logic: no Orbax, no Grain.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

#: The most bytes a state file may hold: a loader state is a few hundred
#: bytes, so anything near this is not one (and is not read whole).
MAX_STATE_BYTES = 1 << 20


def state_file_name(process_index: int, process_count: int) -> str:
    """The file one process's loader state is saved in (Grain's naming)."""
    return f"process_{process_index}-of-{process_count}.json"


_STATE_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")


def parse_state_file_name(name: str) -> tuple[int, int] | None:
    """(process index, process count) of a state_file_name, else None."""
    match = _STATE_FILE.fullmatch(name)
    return (int(match[1]), int(match[2])) if match else None


def saved_states(directory: Path, where: str) -> list[dict[str, Any]]:
    """Every process's state under `directory`, in process order: the files
    of one process count, none missing; else an error naming the files."""
    counts: dict[int, dict[int, Path]] = {}
    for path in directory.glob("*.json"):
        parsed = parse_state_file_name(path.name)
        if parsed is not None:
            counts.setdefault(parsed[1], {})[parsed[0]] = path
    found = sorted(p.name for p in directory.glob("*.json"))
    if len(counts) != 1:
        what = "no state files" if not counts else f"states of {sorted(counts)} processes"
        raise (FileNotFoundError if not counts else ValueError)(
            f"{where}: expected the loader states of one checkpoint's processes "
            f"(process_<i>-of-<n>.json) in {directory}, found {what}: {found}"
        )
    [(count, files)] = counts.items()
    missing = [i for i in range(count) if i not in files]
    if missing:
        raise FileNotFoundError(
            f"{where}: the checkpoint in {directory} lacks the states of process(es) "
            f"{missing} of {count}: expected {[state_file_name(i, count) for i in missing]}, "
            f"found {found}"
        )
    return [read_state_file(files[i], where) for i in range(count)]


def read_state_file(path: Path, where: str) -> dict[str, Any]:
    """The JSON dict in `path`, read without blocking (a FIFO) or reading
    without end (a device): a regular file (a symlink to one is fine) of at
    most MAX_STATE_BYTES, nested no deeper than json can parse. Anything
    else is a ValueError naming the file and what it is."""
    text = _read_regular_file(path, where).decode("utf-8", errors="replace")
    try:
        state = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: {path} is not a loader state (invalid JSON: {e})") from e
    except RecursionError:
        raise ValueError(
            f"{where}: {path} is not a loader state: its JSON is nested too deeply to read (a "
            f"loader state is a flat dict)"
        ) from None
    if not isinstance(state, dict):
        raise ValueError(
            f"{where}: {path} is not a loader state: expected a JSON object, found "
            f"{type(state).__name__}"
        )
    return state


def _read_regular_file(path: Path, where: str) -> bytes:
    try:
        # O_NONBLOCK: a FIFO opens at once instead of waiting for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise ValueError(f"{where}: {path} is not a loader state: {_what_fails(path, e)}") from e
    try:
        mode = os.fstat(fd).st_mode  # What was opened, not what the name pointed at before.
        if not stat.S_ISREG(mode):
            raise ValueError(
                f"{where}: {path} is not a loader state: it is {_kind(mode)}"
                f"{_via_link(path)}; expected a regular file of JSON"
            )
        data = b""
        while len(data) <= MAX_STATE_BYTES:  # Bounded: one byte past the cap says enough.
            chunk = os.read(fd, MAX_STATE_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_STATE_BYTES:
        raise ValueError(
            f"{where}: {path} is not a loader state: it holds more than MAX_STATE_BYTES = "
            f"{MAX_STATE_BYTES} bytes (a loader state is a few hundred)"
        )
    return data


def _what_fails(path: Path, error: OSError) -> str:
    """Why `path` (which exists, maybe as a dangling link) did not open."""
    if error.errno == errno.ELOOP:
        return f"it is a symlink loop (to {os.readlink(path)!r}, whose links never reach a file)"
    if error.errno == errno.ENOENT and os.path.islink(path):
        return f"it is a symlink to {os.readlink(path)!r}, which does not exist"
    try:
        kind = _kind(os.stat(path).st_mode) + _via_link(path)  # A socket does not open.
    except OSError:
        kind = "something that cannot be read"
    return f"it is {kind} ({os.strerror(error.errno or 0)}); expected a regular file of JSON"


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), f"not a regular file (mode {mode:o})")


def _via_link(path: Path) -> str:
    return f" (a symlink to {os.readlink(path)!r})" if os.path.islink(path) else ""

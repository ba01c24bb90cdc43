"""A loader's position in an Orbax checkpoint, beside the model's.

The state saved is ``get_state()`` of a :class:`~jaxbatch.Loader` or of the
:class:`~jaxbatch.DevicePrefetcher` that ``jb.device_prefetch`` /
``jb.global_batches`` return: a small JSON dict, one file per process (each
process loads its own shard), restored in place with ``set_state``. The
file naming rule (Grain's, ``process_<i>-of-<n>.json``) is written and read
here only.

Sections: the state and its file (pure), then the Orbax v0 handler and its
args, then the Orbax v1 ``StatefulCheckpointable`` wrapper.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import stat
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import jax

from jaxbatch._src.base.optional import require
from jaxbatch._src.load.device import DevicePrefetcher
from jaxbatch._src.load.loader import Loader, check_not_read_ahead

# Here, not in jaxbatch/__init__.py: `import jaxbatch` never needs orbax.
ocp = require("orbax.checkpoint", "jaxbatch.checkpoint")

Checkpointed = Loader | DevicePrefetcher

#: The most bytes a state file may hold: a loader state is a few hundred
#: bytes, so anything near this is not one (and is not read whole).
MAX_STATE_BYTES = 1 << 20


# -- the state and its file ------------------------------------------------------


def state_file_name(process_index: int, process_count: int) -> str:
    """The file one process's loader state is saved in (Grain's naming)."""
    return f"process_{process_index}-of-{process_count}.json"


_STATE_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")


def parse_state_file_name(name: str) -> tuple[int, int] | None:
    """(process index, process count) of a state_file_name, else None."""
    match = _STATE_FILE.fullmatch(name)
    return (int(match[1]), int(match[2])) if match else None


def this_process_file(directory: Path) -> Path:
    return Path(directory) / state_file_name(jax.process_index(), jax.process_count())


def check_savable(item: Any, where: str) -> None:
    """Refuses what would not resume where it stands: a Loader read ahead by
    a prefetching iterator (its own state is past the batches queued
    there), or something that is neither a Loader nor such an iterator."""
    if isinstance(item, DevicePrefetcher):
        return
    if not isinstance(item, Loader):
        raise TypeError(
            f"{where}: expected a jb.Loader or the iterator jb.device_prefetch / "
            f"jb.global_batches return (jb.DevicePrefetcher), found {type(item).__name__}"
        )
    check_not_read_ahead(
        item,
        where,
        "save",
        "save that iterator instead: LoaderSave(batches) where "
        "batches = jb.device_prefetch(loader)",
    )


def check_restorable(item: Any, where: str) -> None:
    """Refuses what cannot be restored in place: a Loader read ahead by a
    prefetching iterator (those batches would come first), or something
    that is neither a Loader nor such an iterator."""
    if not isinstance(item, Loader | DevicePrefetcher):
        raise TypeError(
            f"{where}: expected the jb.Loader or jb.DevicePrefetcher to restore into, found "
            f"{type(item).__name__}"
        )
    if isinstance(item, Loader):
        check_not_read_ahead(item, where, "restore", "restore that iterator instead")


def state_to_save(item: Any, where: str) -> dict[str, Any]:
    check_savable(item, where)
    return item.get_state()


def write_state(directory: Path, state: dict[str, Any]) -> None:
    this_process_file(directory).write_text(json.dumps(state, indent=1, sort_keys=True))


def restore_state(directory: Path, item: Any, where: str, elastic: bool = False) -> None:
    """Reads this process's state file under `directory` into `item` in
    place. A missing file names the files there (a checkpoint saved by
    another number of processes has other names); the Loader's own check
    (data, planner, shuffle, shard) raises as it does for ``state=``.
    `elastic`: every saving process's file, restored on this process's
    shard whatever their number (``set_state(states, elastic=True)``)."""
    check_restorable(item, where)
    if elastic:
        item.set_state(saved_states(Path(directory), where), elastic=True)
        return
    path = this_process_file(directory)
    if not os.path.lexists(path):
        found = sorted(p.name for p in Path(directory).glob("*.json"))
        raise FileNotFoundError(
            f"{where}: no loader state for process {jax.process_index()} of "
            f"{jax.process_count()}: expected {path}, found {found or 'no state files'}"
        )
    item.set_state(read_state_file(path, where))


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


# -- Orbax v0: a CheckpointHandler and its args -----------------------------------


class LoaderCheckpointHandler(ocp.CheckpointHandler):
    """Saves and restores a loader's state, one file per process; Orbax
    picks it for :class:`LoaderSave` / :class:`LoaderRestore`."""

    def save(self, directory: Any, args: LoaderSave) -> None:
        write_state(Path(directory), state_to_save(args.item, "LoaderSave"))

    def restore(self, directory: Any, args: LoaderRestore) -> Checkpointed:
        restore_state(Path(directory), args.item, "LoaderRestore", args.elastic)
        return args.item

    def metadata(self, directory: Any) -> None:
        return None

    def structure(self, directory: Any) -> None:
        return None

    def finalize(self, directory: Any) -> None:
        pass

    def close(self) -> None:
        pass


@ocp.args.register_with_handler(LoaderCheckpointHandler, for_save=True)
@dataclasses.dataclass
class LoaderSave(ocp.args.CheckpointArgs):
    """The loader (a ``jb.Loader``, or the iterator ``jb.device_prefetch``
    returns) to save in an Orbax checkpoint, as one item of
    ``ocp.args.Composite``."""

    item: Checkpointed

    def __post_init__(self) -> None:
        check_savable(self.item, "LoaderSave")  # Here, not inside Orbax's save thread.


@ocp.args.register_with_handler(LoaderCheckpointHandler, for_restore=True)
@dataclasses.dataclass
class LoaderRestore(ocp.args.CheckpointArgs):
    """The loader to restore in place (it continues at the batch after the
    saved one); ``CheckpointManager.restore`` returns it. ``elastic=True``
    restores a checkpoint saved by another number of processes: every
    process's file, as ``set_state(states, elastic=True)`` takes them."""

    item: Checkpointed
    elastic: bool = False

    def __post_init__(self) -> None:
        check_restorable(self.item, "LoaderRestore")  # Here, not inside Orbax's thread.


# -- Orbax v1: StatefulCheckpointable ---------------------------------------------


class Checkpointable:
    """A loader as an Orbax v1 ``StatefulCheckpointable``: the state is
    taken when the save starts, written once the directory exists, and
    ``load`` restores the loader in place."""

    def __init__(self, item: Checkpointed, elastic: bool = False) -> None:
        self.item = item
        self.elastic = elastic  # load: every process's file (see LoaderRestore)

    async def save(self, directory: Any) -> Awaitable[None]:
        state = state_to_save(self.item, "Checkpointable")

        async def write() -> None:
            write_state(Path(await directory.await_creation()), state)

        return write()

    async def load(self, directory: Any) -> Awaitable[None]:
        restore_state(Path(directory), self.item, "Checkpointable", self.elastic)

        async def done() -> None:
            pass

        return done()

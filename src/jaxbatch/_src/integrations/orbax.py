"""A loader's position in an Orbax checkpoint, beside the model's.

The state saved is ``get_state()`` of a :class:`~jaxbatch.Loader` or of the
:class:`~jaxbatch.DevicePrefetcher` that ``jb.device_prefetch`` /
``jb.global_batches`` return: a small JSON dict, one file per process (each
process loads its own shard), restored in place with ``set_state``. The
files and their naming rule (Grain's, ``process_<i>-of-<n>.json``) are
integrations/state_files.py's.

Sections: saving and restoring a state, then the Orbax v0 handler and its
args, then the Orbax v1 ``StatefulCheckpointable`` wrapper.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import jax

from jaxbatch._src.base.optional import require
from jaxbatch._src.integrations.state_files import (
    read_state_file,
    saved_states,
    state_file_name,
)
from jaxbatch._src.load.device import DevicePrefetcher
from jaxbatch._src.load.loader import Loader, check_not_read_ahead

# Here, not in jaxbatch/__init__.py: `import jaxbatch` never needs orbax.
ocp = require("orbax.checkpoint", "jaxbatch.checkpoint")

Checkpointed = Loader | DevicePrefetcher


# -- saving and restoring a state -----------------------------------------------


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

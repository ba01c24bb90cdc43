"""A Loader's Grain checkpoint restored on another number of processes.

Grain's checkpoint handler (``grain.checkpoint.CheckpointSave`` /
``CheckpointRestore``) writes one ``process_<i>-of-<n>.json`` per process and
restores each process from its own file, so a checkpoint saved by n
processes does not restore on m. :class:`CheckpointRestore` here is Grain's
restore args with ``elastic``: the handler reads every saving process's file
from the directory Grain wrote (read-only, through state_files.py, the one
owner of that naming rule) and hands them all to the
:class:`~jaxbatch.grain.LoaderIterator`, whose Loader continues the same
global stream on this process's shard (``set_state(states, elastic=True)``),
as Orbax's ``jaxbatch.checkpoint.LoaderRestore(item, elastic=True)`` does.
Without ``elastic`` it restores exactly as Grain's own handler.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from jaxbatch._src.base.optional import optional, require
from jaxbatch._src.integrations.grain import LoaderIterator
from jaxbatch._src.integrations.state_files import saved_states

grain = require("grain", "jaxbatch.grain")
# Orbax drives Grain's handler; without it there is nothing to register with.
ocp = optional("orbax.checkpoint")
_ARGS = ocp.args.CheckpointArgs if ocp else object

_WHERE = "jaxbatch.grain.CheckpointRestore"


class CheckpointHandler(grain.checkpoint.CheckpointHandler):
    """Grain's handler, restoring a :class:`CheckpointRestore` with
    ``elastic=True`` from every process's file; Orbax picks it for
    :class:`CheckpointSave` and :class:`CheckpointRestore`. Saving is
    Grain's, file for file, so either Grain's args or these save a
    checkpoint that either restores."""

    def restore(self, directory: Any, item: Any = None, args: Any = None) -> Any:
        if not getattr(args, "elastic", False):
            return super().restore(directory, item=item, args=args)
        target = item or args.item
        states = saved_states(Path(directory), _WHERE)  # Named errors: files missing or mixed.
        target.set_state(states, elastic=True)
        target.start_prefetch()  # As Grain's own handler does after set_state.
        return target


@dataclasses.dataclass
class CheckpointSave(_ARGS):
    """Grain's ``grain.checkpoint.CheckpointSave``, under the handler that
    :class:`CheckpointRestore` restores with (Orbax pairs a handler with
    one save args type); it writes what Grain's writes."""

    item: Any

    def __post_init__(self) -> None:
        require("orbax.checkpoint", "jaxbatch.grain.CheckpointSave")


@dataclasses.dataclass
class CheckpointRestore(_ARGS):
    """Grain's ``grain.checkpoint.CheckpointRestore`` for a
    :class:`~jaxbatch.grain.LoaderIterator`, with ``elastic=True`` to restore
    a checkpoint saved by another number of processes: every process's
    ``process_<i>-of-<n>.json`` is read (refused naming the missing ones)
    and the Loader continues the same global stream on its own shard.

    Example::

        it = jaxbatch.grain.LoaderIterator(jb.Loader(ds, planner, shard="jax"))
        manager.restore(step, args=ocp.args.Composite(
            data=jaxbatch.grain.CheckpointRestore(it, elastic=True)))
    """

    item: Any
    elastic: bool = False

    def __post_init__(self) -> None:
        require("orbax.checkpoint", _WHERE)  # Grain checkpoints through Orbax.
        if self.elastic and not isinstance(self.item, LoaderIterator):
            raise TypeError(
                f"{_WHERE}: elastic=True restores a jaxbatch.grain.LoaderIterator (its Loader "
                f"takes every process's state), found {type(self.item).__name__}; restore "
                f"other Grain iterators with elastic=False"
            )


if ocp is not None:
    ocp.args.register_with_handler(CheckpointHandler, for_save=True)(CheckpointSave)
    ocp.args.register_with_handler(CheckpointHandler, for_restore=True)(CheckpointRestore)

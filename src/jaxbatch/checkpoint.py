"""Orbax checkpoints of a loader's position, saved beside the model in the
same step: ``LoaderSave`` / ``LoaderRestore`` for ``ocp.args.Composite``
(Orbax's ``CheckpointManager``), one file per process, restored in place so
the iterator continues at the batch after the saved one. Save the iterator
``jb.device_prefetch`` / ``jb.global_batches`` return (it reads the Loader
ahead; saving the Loader under it is refused). ``Checkpointable`` is the same
for Orbax v1's ``save_checkpointables``. Needs orbax-checkpoint
(``pip install 'jaxbatch[orbax]'``).

Example::

    import orbax.checkpoint as ocp
    import jaxbatch.checkpoint as jbc

    batches = jb.device_prefetch(jb.Loader(ds, planner, epochs=None))
    manager = ocp.CheckpointManager(path)
    manager.save(step, args=ocp.args.Composite(
        model=ocp.args.StandardSave(params), loader=jbc.LoaderSave(batches)))
    # after a restart, with params_like and batches built as before:
    restored = manager.restore(manager.latest_step(), args=ocp.args.Composite(
        model=ocp.args.StandardRestore(params_like), loader=jbc.LoaderRestore(batches)))
    params = restored.model
"""

from jaxbatch._src.integrations.orbax import Checkpointable as Checkpointable
from jaxbatch._src.integrations.orbax import LoaderCheckpointHandler as LoaderCheckpointHandler
from jaxbatch._src.integrations.orbax import LoaderRestore as LoaderRestore
from jaxbatch._src.integrations.orbax import LoaderSave as LoaderSave

__all__ = ["Checkpointable", "LoaderCheckpointHandler", "LoaderRestore", "LoaderSave"]

"""jaxbatch in Grain pipelines: ``BatchIterDataset`` batches a Grain
``MapDataset`` / ``IterDataset`` of variable-length examples with any
jaxbatch planner (token budgets, buckets, packing), planned and collated by
the engine over windows of examples, checkpointed by Grain; and
``LoaderIterator`` / ``LoaderIterDataset`` make a :class:`jaxbatch.Loader`
a Grain iterator / dataset, for Grain's checkpoint handler and ``.map``;
``CheckpointRestore(it, elastic=True)`` restores a Grain checkpoint saved by
another number of processes.
Needs grain (``pip install 'jaxbatch[grain]'``).

Example::

    import grain
    import jaxbatch as jb
    import jaxbatch.grain as jbg

    ds = grain.MapDataset.source(examples).shuffle(seed=0)   # dicts of arrays
    ds = jbg.BatchIterDataset(ds, jb.FixedBuckets([64, 128, 256], token_budget=4096),
                              window=1024)
    it = iter(ds)
    batch = next(it)                 # batch["tokens"], batch["tokens_mask"], ...
    state = it.get_state()           # JSON; it.set_state(state) resumes here

    it = jbg.LoaderIterator(jb.Loader(data, jb.Pack(row_length=512, rows_per_batch=8)))
"""

from jaxbatch._src.integrations.grain import BatchIterDataset as BatchIterDataset
from jaxbatch._src.integrations.grain import LoaderIterator as LoaderIterator
from jaxbatch._src.integrations.grain import LoaderIterDataset as LoaderIterDataset
from jaxbatch._src.integrations.grain import PlannedBatchIterator as PlannedBatchIterator
from jaxbatch._src.integrations.grain_checkpoint import CheckpointHandler as CheckpointHandler
from jaxbatch._src.integrations.grain_checkpoint import CheckpointRestore as CheckpointRestore
from jaxbatch._src.integrations.grain_checkpoint import CheckpointSave as CheckpointSave

__all__ = [
    "BatchIterDataset",
    "CheckpointHandler",
    "CheckpointRestore",
    "CheckpointSave",
    "LoaderIterDataset",
    "LoaderIterator",
    "PlannedBatchIterator",
]

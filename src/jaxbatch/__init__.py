"""jaxbatch: fast, safe batch processing for JAX.

Ragged data is planned into a few padded shapes (or packed rows) and
collated by a C++ engine, so `jit` compiles a bounded number of times and
padding waste is measured and minimised.

Example::

    import jaxbatch as jb
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n) for n in (5, 3, 9, 2)]})
    plan = jb.plan(ds, jb.AutoBuckets(max_shapes=2, batch_size=2))
    for spec in plan:
        batch = jb.collate(ds, spec)   # tokens, tokens_mask, tokens_lengths, example_index
"""

from jaxbatch._src.base import interrupt as _interrupt

# First of all: Ctrl-C while jax loads (and later while JAX works) must be
# neither lost nor fatal.
_interrupt.import_jax()

from jaxbatch import masked  # a namespace module: jb.masked.sum(...)
from jaxbatch._src.collate.collate import Batch, collate
from jaxbatch._src.collate.unbatch import join_pieces, unbatch
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.data.mixture import Mixture, SourceShare
from jaxbatch._src.execute.autotune import AutotuneResult, autotune
from jaxbatch._src.execute.axes import AxisError, check_axes
from jaxbatch._src.execute.map import MapResult, MapStats, map
from jaxbatch._src.execute.memory import MemoryEstimate, estimate_memory, max_batch_size
from jaxbatch._src.execute.vmap import vmap
from jaxbatch._src.job.folder import JobError
from jaxbatch._src.job.job import JobReport, run
from jaxbatch._src.job.read import read_output
from jaxbatch._src.job.tokenize import TokenizeReport, tokenize
from jaxbatch._src.load.device import (
    DevicePrefetcher,
    device_prefetch,
    global_batches,
    process_local,
)
from jaxbatch._src.load.loader import (
    ColumnSchema,
    Loader,
    LoaderKwargs,
    LoaderOptions,
    LoaderStats,
)
from jaxbatch._src.ops.broadcast import BroadcastError, explain_broadcast, strict_broadcasting
from jaxbatch._src.plan.plan import BatchPlan, BatchShape, BatchSpec, PlanStats, plan
from jaxbatch._src.plan.planners import (
    AspectBuckets,
    AutoBuckets,
    FixedBuckets,
    GraphBuckets,
    GraphBudget,
    GraphBudgetKwargs,
    Pack,
    PadToMax,
    PatchPack,
    Planner,
)
from jaxbatch._src.version import RELEASE as __version__  # noqa: F401 (the release)

__all__ = [
    "AspectBuckets",
    "AutoBuckets",
    "AutotuneResult",
    "AxisError",
    "Batch",
    "BatchPlan",
    "BatchShape",
    "BatchSpec",
    "BroadcastError",
    "ColumnSchema",
    "Dataset",
    "DevicePrefetcher",
    "FixedBuckets",
    "GraphBuckets",
    "GraphBudget",
    "GraphBudgetKwargs",
    "JobError",
    "JobReport",
    "Loader",
    "LoaderKwargs",
    "LoaderOptions",
    "LoaderStats",
    "MapResult",
    "MapStats",
    "MemoryEstimate",
    "Mixture",
    "Pack",
    "PadToMax",
    "PatchPack",
    "PlanStats",
    "SourceShare",
    "Planner",
    "TokenizeReport",
    "autotune",
    "check_axes",
    "collate",
    "device_prefetch",
    "estimate_memory",
    "explain_broadcast",
    "global_batches",
    "join_pieces",
    "map",
    "masked",
    "max_batch_size",
    "plan",
    "process_local",
    "read_output",
    "run",
    "strict_broadcasting",
    "tokenize",
    "unbatch",
    "vmap",
]

"""The Ray Data stage's test side inside a loopback-only network namespace
(tests/test_ray_data.py): a local Ray instance of 2 CPUs runs
``ds.map_batches(jbr.Stage, ...)`` over ragged rows with 2 actors and writes
what came back to RESULT (Parquet).

Usage: python ray_data_worker.py RESULT RAY_TEMP
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
import ray_job_functions  # noqa: E402
from ray_job_functions import check, fun, make_tokens  # noqa: E402

import jaxbatch as jb  # noqa: E402
import jaxbatch.ray as jbr  # noqa: E402

ROWS = 3000
BLOCK_ROWS = 700  # blocks of several planned batches, and a short last one


def stage_input() -> pa.Table:
    """Row ids and tokens: lengths 1 to 24, some over the planner's 16."""
    tokens = make_tokens(ROWS, seed=1)
    return pa.table({"id": pa.array(range(ROWS), pa.int64()), "tokens": pa.array(tokens)})


def main(result: Path, ray_temp: str) -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=ray_temp)
    ray.cloudpickle.register_pickle_by_value(ray_job_functions)
    out = ray.data.from_arrow(stage_input()).map_batches(
        jbr.Stage,
        fn_constructor_kwargs={
            "fun": fun,
            "planner": jb.FixedBuckets([8, 16], batch_size=32, too_long="skip"),
            "column": "tokens",
            "check": check,
            "on_error": "quarantine",
        },
        batch_size=BLOCK_ROWS,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=2),
    )
    pq.write_table(pa.concat_tables(ray.get(out.to_arrow_refs())), result)
    ray.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])

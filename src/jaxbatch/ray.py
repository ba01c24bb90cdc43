"""jaxbatch on a Ray cluster: ``run`` is :func:`jaxbatch.run` with its work
spread over warm Ray actors (planned once on the driver, each work unit's
output committed exactly once, resumed after any worker, node or the driver
dies), and ``Stage`` is a Ray Data stage for ``ds.map_batches`` that plans
each block with a jaxbatch planner. Needs ray (``pip install 'jaxbatch[ray]'``).

Example::

    import ray
    import jaxbatch as jb
    import jaxbatch.ray as jbr

    ray.init(address="auto")
    report = jbr.run(embed, "/shared/corpus.parquet", "/shared/out/", column="tokens",
                     planner=jb.AutoBuckets(8, batch_size=64), workers=8, num_gpus=1)
    vectors = jb.read_output("/shared/out/")["output"]
"""

from jaxbatch._src.integrations.ray import run as run
from jaxbatch._src.integrations.ray_data import Stage as Stage

__all__ = ["Stage", "run"]

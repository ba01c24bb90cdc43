"""Mistakes a type checker must catch in a user's jaxbatch code: each line
marked ``# E: <text>`` must get a mypy error containing <text>, and no other
line any (tests/test_typing.py). Never run."""

from __future__ import annotations

import jax

import jaxbatch as jb

ds = jb.Dataset.from_arrays({"tokens": [[1, 2, 3], [4]]})
jb.Loader(ds, jb.PadToMax(2), shuffle="sometimes")  # E: "shuffle"
jb.Loader(ds, jb.PadToMax(2), on_error="ignore")  # E: "on_error"
jb.Loader(ds, jb.PadToMax(2), shard="all")  # E: "shard"
jb.Loader(ds, jb.PadToMax(2), suffle=True)  # E: Unexpected keyword argument "suffle"
jb.LoaderOptions(shuffle="sometimes")  # E: "shuffle" to "LoaderOptions"
jb.PadToMax(8, remainder="truncate")  # E: "remainder" to "PadToMax"
jb.FixedBuckets([8, 16], batch_size=4, too_long="clip")  # E: "too_long" to "FixedBuckets"
jb.Pack(64, 4, algorithm="worst_fit")  # E: "algorithm" to "Pack"
jb.GraphBudget(nodes=8, edges=8, graphs=2, too_big="drop")  # E: "too_big" to "GraphBudget"
jb.map(lambda x: x, ds, on_oom="retry")  # E: "on_oom" to "map"
jb.map(lambda x: x, ds, on_error="skip")  # E: "on_error" to "map"
jb.map(lambda x: x, ds, batch_size="max")  # E: "batch_size" to "map"
jb.run(lambda x: x, ds, "out", on_error="ignore")  # E: "on_error" to "run"
jb.vmap(lambda x: x, chunk_size="big")  # E: "chunk_size" to "vmap"
jb.plan(ds, "AutoBuckets")  # E: "plan" has incompatible type "str"
length: str = len(ds)  # E: Incompatible types in assignment
batch = jb.collate(ds, jb.plan(ds, jb.PadToMax(2))[0])
jb.unbatch(batch["tokens"], batch, per="nodes")  # E: "per" to "unbatch"
# A host batch holds numpy arrays, not Any: a jax.Array is device_prefetch's.
on_device: jax.Array = batch["tokens"]  # E: variable has type "Array"
on_host = jb.device_prefetch(jb.Loader(ds, jb.PadToMax(2)))
host: jb.Batch = next(on_host)  # E: "DevicePrefetcher[Batch[Array]]"
budget = dict(nodes=8, edges=8, graphs=2)  # a dict of ints could fill algorithm=
jb.GraphBuckets(3, **budget)  # E: "GraphBuckets" has incompatible type "**dict[str, int]"
planners = [jb.PadToMax(2), jb.Pack(64, 4)]  # typed by their private base, not jb.Planner
jb.plan(ds, planners[0])  # E: "plan" has incompatible type "_Planner"

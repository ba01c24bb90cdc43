"""One process of the multi-process tests (tests/test_multihost.py), started
by launch.launch_local as a real jax.distributed process.

    python tests/multihost_worker.py MODE OUT_DIR

MODE: ``streams`` records every planner x shuffle mode's batches (shapes,
example ids, and the stream after a restore) and runs a job (jb.run with
shard="jax") into OUT_DIR/job; ``train`` runs two epochs of a
jitted training step over global batches and checkpoints after CHECKPOINT_STEP
steps; ``resume`` restores that checkpoint and trains to the end; ``elastic``
restores the checkpoints of $SAVED_ON processes with elastic=True and records
each step's shapes and this process's examples; ``die``:
process $DIE (default 1) exits after two steps, the others keep training; ``mismatch``
builds Loaders that are equal on every process, then one per MISMATCH_KINDS that
differs on process 1, recording each error, and ends with the last one's;
``absent``: process 1 builds no Loader. Each process writes
OUT_DIR/<mode>-<process>.json. The data, model and step are importable so
the test computes the single-process reference with the same code.
"""

import itertools
import json
import os
import sys

import numpy as np

import jaxbatch as jb

NUM_EXAMPLES = 157  # odd: shards get uneven tails to even out
CHECKPOINT_STEP = 7
LEARNING_RATE = 0.05
PLANNERS = {
    "pad": jb.PadToMax(8),
    "fixed": jb.FixedBuckets([12, 24, 48], batch_size=6),
    "auto": jb.AutoBuckets(3, batch_size=4, pad_to_multiple=4),
    "pack": jb.Pack(48, 2, max_segments_per_row=8),
    "auto_drop": jb.AutoBuckets(3, batch_size=4, remainder="drop"),
}
SHUFFLES = (True, "block", False)
# Token-budget rows (100 // length) rounded down to a multiple of 2, the
# local device count, so each process's rows split over its devices.
TRAIN_PLANNER = jb.AutoBuckets(3, token_budget=100, rows_multiple=2)


def dataset(num_examples: int = NUM_EXAMPLES, seed: int = 7) -> jb.Dataset:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 49, num_examples)
    tokens = [rng.normal(size=n).astype(np.float32) for n in lengths]
    target = np.array([3.0 * t.mean() - 1.0 for t in tokens], np.float32)
    return jb.Dataset.from_arrays({"tokens": tokens, "target": target})


def init_params():
    return {"w": np.float32(0.0), "b": np.float32(0.0)}


def loss_fn(params, batch):
    """Mean squared error of a linear model on each example's mean token,
    over the real rows of the (global) batch."""
    import jax.numpy as jnp

    mask = batch["tokens_mask"]
    mean = jnp.where(mask, batch["tokens"], 0).sum(1) / jnp.maximum(batch["tokens_lengths"], 1)
    real = batch["example_index"] >= 0
    err = jnp.where(real, params["w"] * mean + params["b"] - batch["target"], 0.0)
    return (err * err).sum() / jnp.maximum(real.sum(), 1)


def example_mean(example):
    import jax.numpy as jnp

    tokens = jnp.where(example["tokens_mask"], example["tokens"], 0)
    return tokens.sum() / jnp.maximum(example["tokens_lengths"], 1)


def make_train_step():
    import jax

    @jax.jit
    def step(params, batch):
        # The batch is sharded over the data axis: XLA all-reduces the
        # gradient's per-device partial sums across every process.
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        params = jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)
        return params, loss

    return step


def record(batch) -> dict:
    return {
        "epoch": batch.epoch,
        "shapes": {k: list(v.shape) for k, v in sorted(batch.items())},
        "examples": sorted(int(e) for e in np.asarray(batch["example_index"]).ravel() if e >= 0),
    }


def streams(ds, out_dir) -> dict:
    out = {}
    for name, planner in PLANNERS.items():
        for shuffle in SHUFFLES:
            key = f"{name}/{shuffle}"
            args = dict(shuffle=shuffle, block_size=32, seed=3, shard="jax", num_threads=2)
            with jb.Loader(ds, planner, epochs=2, **args) as loader:
                stream, state = [], None
                for batch in loader:
                    stream.append(record(batch))
                    if len(stream) == 3:
                        state = loader.get_state()
            with jb.Loader(ds, planner, epochs=2, state=state, **args) as resumed:
                after = [record(b) for b in resumed]
            with jb.Loader(ds, planner, epochs=None, **args) as forever:
                endless = [record(b) for b in itertools.islice(forever, len(stream) + 5)]
            out[key] = {"stream": stream, "resumed": after, "forever": endless}
    with jb.Loader(ds, TRAIN_PLANNER, shard="jax", seed=5) as loader:
        out["map"] = {e: float(v) for e, v in jb.map(example_mean, loader).outputs.items()}
    report = jb.run(example_mean, ds, os.path.join(out_dir, "job"), planner=TRAIN_PLANNER,
                    shard="jax", progress=False)  # fmt: skip
    out["job"] = {"examples": report.examples, "total": report.total, "out_dir": out_dir}
    return out


# Mismatch kinds, in the order every process builds them: process 1's Loader
# differs from process 0's in that kind only. Each raises on both processes and
# is recorded; the last is left to end both processes with its error.
MISMATCH_KINDS = ("lengths", "seed", "planner", "epochs", "shuffle", "position",
                  "global_batches_seed", "global_batches_unsharded",
                  "global_batches_same_shard", "data")  # fmt: skip
MISMATCH_PLANNERS = (jb.AutoBuckets(3, batch_size=4), jb.AutoBuckets(3, batch_size=5))


def mismatch_args(kind: str, process: int) -> dict:
    """The Loader process `process` builds for mismatch `kind` ("equal": the
    same on every process)."""
    other = int(process == 1)
    args = dict(source=dataset(), planner=MISMATCH_PLANNERS[0], seed=3, epochs=2, shard="jax")
    if kind == "data":
        args["source"] = dataset(NUM_EXAMPLES + other)
    elif kind == "lengths":
        args["source"] = dataset(seed=7 + other)
    elif kind == "seed":
        args["seed"] = 3 + other
    elif kind == "planner":
        args["planner"] = MISMATCH_PLANNERS[other]
    elif kind == "epochs":
        args["epochs"] = 2 - other
    elif kind == "shuffle":
        args["shuffle"] = "block" if other else True
    elif kind == "position":  # Restored from states 3 and 2 batches in.
        with jb.Loader(**dict(args, shard=(process, 2))) as loader:
            list(itertools.islice(loader, 3 - other))
            args["state"] = loader.get_state()
    elif kind == "global_batches_seed":  # Explicit shards: only global_batches can check.
        args.update(shard=(process, 2), seed=3 + other)
    elif kind == "global_batches_unsharded":
        args["shard"] = None
    elif kind == "global_batches_same_shard":
        args["shard"] = (0, 2)
    return args


def build(kind: str, process: int) -> list:
    """Builds kind's Loader (and global batches over it) and returns its stream."""
    with jb.Loader(**mismatch_args(kind, process)) as loader:
        if kind.startswith("global_batches"):
            return [{k: list(v.shape) for k, v in b.items()} for b in jb.global_batches(loader)]
        return [record(b) for b in loader]


def mismatch(process) -> dict:
    out = {"equal": build("equal", process), "equal_again": build("equal", process)}
    for kind in MISMATCH_KINDS[:-1]:
        try:
            build(kind, process)
            out[kind] = "no error"
        except ValueError as e:
            out[kind] = str(e)
    return out


def train(ds, out_dir, mode, process):
    import jax

    step = make_train_step()
    params, start_state = init_params(), None
    if mode == "resume":
        with open(os.path.join(out_dir, f"checkpoint-{process}.json")) as f:
            ckpt = json.load(f)
        params = {k: np.float32(v) for k, v in ckpt["params"].items()}
        start_state = ckpt["loader"]
    losses, shapes, outputs = [], [], {}
    per_example = jax.jit(jax.vmap(example_mean))
    loader = jb.Loader(ds, TRAIN_PLANNER, seed=5, shard="jax", epochs=2, state=start_state)
    with loader:
        batches = jb.global_batches(loader)
        for i, batch in enumerate(batches):
            if mode == "die" and process == int(os.environ.get("DIE", "1")) and i == 2:
                os._exit(17)
            params, loss = step(params, batch)
            losses.append(float(loss))
            shapes.append({k: list(v.shape) for k, v in sorted(batch.items())})
            # Per-example outputs of the global batch, back on the process
            # that loaded those examples.
            ids, means = jb.process_local((batch["example_index"], per_example(batch)))
            for e, m in zip(ids.tolist(), means.tolist(), strict=True):
                if e >= 0:
                    outputs.setdefault(e, []).append(m)
            if mode == "train" and i + 1 == CHECKPOINT_STEP:
                ckpt = {"params": {k: float(v) for k, v in jax.device_get(params).items()},
                        "loader": batches.get_state()}  # fmt: skip
                with open(os.path.join(out_dir, f"checkpoint-{process}.json"), "w") as f:
                    json.dump(ckpt, f)
    return {"losses": losses, "shapes": shapes, "outputs": outputs}


def elastic(ds, out_dir, process):
    """Restores every process's checkpoint of a `train` run (on another
    number of processes) with elastic=True and records what each step holds."""
    import jax

    states = []
    for i in range(int(os.environ["SAVED_ON"])):
        with open(os.path.join(out_dir, f"checkpoint-{i}.json")) as f:
            states.append(json.load(f)["loader"])
    loader = jb.Loader(ds, TRAIN_PLANNER, seed=5, shard="jax", epochs=2)
    shapes, examples = [], []
    with loader:
        batches = jb.global_batches(loader)
        batches.set_state(states, elastic=True)
        for batch in batches:
            shapes.append({k: list(v.shape) for k, v in sorted(batch.items())})
            ids = jb.process_local(batch["example_index"])
            examples.extend(int(e) for e in ids if e >= 0)
        state = batches.get_state()
    return {"shapes": shapes, "examples": examples, "local_rows": jax.local_device_count(),
            "shard": state["shard"]}  # fmt: skip


def main():
    mode, out_dir = sys.argv[1], sys.argv[2]
    from launch import initialize_from_env

    initialize_from_env(heartbeat_timeout=5 if mode == "die" else 100, init_timeout=60)
    import jax

    process = jax.process_index()
    ds = dataset()
    result = {
        "process": process,
        "count": jax.process_count(),
        "devices": jax.device_count(),
    }
    if mode == "streams":
        result.update(streams(ds, out_dir))
    elif mode == "mismatch":
        result.update(mismatch(process))
    elif mode == "elastic":
        result.update(elastic(ds, out_dir, process))
    elif mode == "absent":  # Process 1 never builds its Loader.
        result["stream"] = build("equal", process) if process != 1 else None
    else:
        result.update(train(ds, out_dir, mode, process))
    with open(os.path.join(out_dir, f"{mode}-{process}.json"), "w") as f:
        json.dump(result, f)
    if mode == "mismatch":
        build(MISMATCH_KINDS[-1], process)  # Raises: the process exits with the error.
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()

"""One process of tests/test_checkpoint.py: training with the model and the
loader in one Orbax CheckpointManager checkpoint, restored in a fresh process.

    python tests/checkpoint_worker.py MODE CKPT_DIR OUT [ARGS...]

MODE: ``train EVERY STOP`` trains one process, saving every EVERY steps;
after STOP steps it writes OUT and waits to be killed (kill -9).
``resume STEPS`` restores the latest checkpoint in CKPT_DIR and trains STEPS
more steps, writing their losses and batches to OUT (JSON). Under
jax.distributed (tests/launch.py), ``multi_train EVERY STEPS`` trains on
global batches saving at step EVERY and goes on to STEPS, and
``multi_resume STEPS`` restores and trains to STEPS; each process writes
OUT-<process>.json. The data, model and step are tests/multihost_worker.py's,
so the test computes the uninterrupted reference with the same code.
"""

import json
import os
import sys
import time

import multihost_worker as model
import numpy as np
import orbax.checkpoint as ocp

import jaxbatch as jb
import jaxbatch.checkpoint as jbc

SEED = 5


def batches(shard=None):
    """The prefetching iterator the training loop reads (global batches
    under jax.distributed)."""
    loader = jb.Loader(model.dataset(), model.TRAIN_PLANNER, seed=SEED, epochs=None, shard=shard)
    return jb.global_batches(loader) if shard == "jax" else jb.device_prefetch(loader, size=3)


def record(step, batch, loss) -> dict:
    """A step as the test compares it: the loss, and this process's rows of
    the batch (all of it in one process)."""
    local = jb.process_local(batch)
    rows = {k: v.tolist() for k, v in sorted(local.items())}
    return {"step": step, "loss": float(loss), "batch": rows}


def save(manager, step, params, it) -> None:
    items = ocp.args.Composite(model=ocp.args.StandardSave(params), loader=jbc.LoaderSave(it))
    manager.save(step, args=items)
    manager.wait_until_finished()


def restore(manager, it, params_like):
    step = manager.latest_step()
    restored = manager.restore(
        step,
        args=ocp.args.Composite(
            model=ocp.args.StandardRestore(params_like), loader=jbc.LoaderRestore(it)
        ),
    )
    assert restored.loader is it
    return step, restored.model


def replicated_params_like():
    """The abstract params, replicated over every device of every process
    (as the global step leaves them), for the restore to place them alike."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec())
    return {
        k: jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype, sharding=sharding)
        for k, v in model.init_params().items()
    }


def main():
    mode, ckpt_dir, out = sys.argv[1], sys.argv[2], sys.argv[3]
    args = [int(a) for a in sys.argv[4:]]
    multi = mode.startswith("multi_")
    if multi:
        from launch import initialize_from_env

        initialize_from_env(init_timeout=60)
    import jax

    step_fn = model.make_train_step()
    manager = ocp.CheckpointManager(ckpt_dir)
    it = batches("jax" if multi else None)
    steps = []
    if mode in ("train", "multi_train"):
        every, stop = args
        params, start = model.init_params(), 0
    else:
        (stop,) = args
        params_like = replicated_params_like()
        start, params = restore(manager, it, params_like)
    for i in range(start, stop):
        batch = next(it)
        params, loss = step_fn(params, batch)
        steps.append(record(i + 1, batch, loss))
        if mode in ("train", "multi_train") and (i + 1) % every == 0:
            save(manager, i + 1, params, it)
    manager.close()
    name = f"{out}-{jax.process_index()}.json" if multi else out
    with open(name + ".tmp", "w") as f:
        json.dump({"start": start, "steps": steps, "process": jax.process_index()}, f)
    os.replace(name + ".tmp", name)
    if mode == "train":
        time.sleep(120)  # Killed here (kill -9), its last checkpoint behind it.
    if multi:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()

"""The mixture the mixture job tests run (test_mixture_jobs.py), in-process
and, killed and resumed, as `python tests/mixture_job_functions.py OUT SEED`."""

import numpy as np

# Rows a batch and a shard's examples of the jobs: small, so a kill lands mid-job.
ROWS, EVERY = 8, 24


def corpus(seed: int, count: int, longest: int):
    import jaxbatch as jb

    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, longest, count)
    return jb.Dataset.from_arrays({"tokens": [rng.integers(0, 50, n) for n in lengths]})


def mixture(scale: int = 1, weights=None, exhaustion: str = "restart"):
    """Three sources of other sizes and lengths, weighed by tokens: under
    "restart" the small one runs out and repeats."""
    import jaxbatch as jb

    sources = {
        "web": corpus(1, 60 * scale, 12),
        "code": corpus(2, 12 * scale, 30),
        "math": corpus(3, 20 * scale, 20),
    }
    weights = weights or {"web": 0.5, "code": 0.3, "math": 0.2}
    return jb.Dataset.mix(sources, weights, unit="tokens", exhaustion=exhaustion, block_size=16)


def run_job(out, seed: int, scale: int = 1, shard=None, elastic: bool = False, **options):
    """The job the tests run (and kill): summarise over one pass of the
    mixture (`options` make the mixture), on process `shard`."""
    from job_functions import summarise

    import jaxbatch as jb

    return jb.run(summarise, mixture(scale, **options), out, seed=seed,
                  planner=jb.FixedBuckets([32], batch_size=ROWS), checkpoint_every=EVERY,
                  progress=False, shard=shard, elastic=elastic)  # fmt: skip


if __name__ == "__main__":
    import sys

    run_job(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))

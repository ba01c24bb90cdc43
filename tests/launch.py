"""Runs N real jax.distributed processes on this machine (loopback), for the
multi-process tests, the scale benchmark and trying multi-host code on one
host. Not cluster code: on a cluster each host starts its own process and
JAX finds the coordinator itself (``jax.distributed.initialize()``).

Each child gets ``JAXBATCH_COORDINATOR``, ``JAXBATCH_NUM_PROCESSES`` and
``JAXBATCH_PROCESS_ID`` in its environment and calls
:func:`initialize_from_env`.

Example::

    results = launch_local([sys.executable, "train.py"], num_processes=2, timeout=60)
    assert all(r.returncode == 0 for r in results)
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence

_ENV_COORDINATOR = "JAXBATCH_COORDINATOR"
_ENV_NUM = "JAXBATCH_NUM_PROCESSES"
_ENV_ID = "JAXBATCH_PROCESS_ID"


@dataclasses.dataclass
class ProcessResult:
    process_id: int
    returncode: int | None  # None: killed at the timeout
    output: str  # stdout and stderr together

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def free_port() -> int:
    """A TCP port free on loopback now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_local(
    argv: Sequence[str],
    num_processes: int,
    *,
    local_devices: int = 2,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> list[ProcessResult]:
    """Starts `num_processes` copies of `argv`, each a CPU JAX process with
    `local_devices` devices, and waits for all of them. Processes still
    running after `timeout` seconds are killed and reported with
    ``returncode=None``: a hang fails, it never blocks the caller."""
    port = free_port()
    base = dict(os.environ, **(env or {}))
    base.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={local_devices}",
        **{_ENV_COORDINATOR: f"127.0.0.1:{port}", _ENV_NUM: str(num_processes)},
    )
    procs, logs = [], []
    for i in range(num_processes):
        log = tempfile.TemporaryFile(mode="w+")
        logs.append(log)
        procs.append(
            subprocess.Popen(
                list(argv),
                env=dict(base, **{_ENV_ID: str(i)}),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    deadline = time.monotonic() + timeout
    codes: list[int | None] = [None] * num_processes
    try:
        while any(c is None for c in codes) and time.monotonic() < deadline:
            for i, p in enumerate(procs):
                if codes[i] is None:
                    codes[i] = p.poll()
            time.sleep(0.05)
    finally:
        for i, p in enumerate(procs):
            if codes[i] is None:
                p.kill()
                p.wait()
    results = []
    for i, log in enumerate(logs):
        log.seek(0)
        results.append(ProcessResult(i, codes[i], log.read()))
        log.close()
    return results


def initialize_from_env(heartbeat_timeout: int = 100, init_timeout: int = 300) -> None:
    """``jax.distributed.initialize`` from the variables :func:`launch_local`
    sets, with gloo collectives across CPU processes."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=os.environ[_ENV_COORDINATOR],
        num_processes=int(os.environ[_ENV_NUM]),
        process_id=int(os.environ[_ENV_ID]),
        initialization_timeout=init_timeout,
        heartbeat_timeout_seconds=heartbeat_timeout,
        shutdown_timeout_seconds=max(heartbeat_timeout, 5),
    )

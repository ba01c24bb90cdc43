"""Runs a command in a network namespace of its own with only loopback up,
for everything here that starts Ray (tests/test_ray_*.py, bench_ray.py).

Outside one, Ray advertises the machine's interface address and probes a
public resolver to find it; inside one, every Ray process can bind and
connect to 127.0.0.1 only, and nothing it does leaves the machine. Needs
``unshare -n`` (root, or a user namespace): where it is not permitted,
``skip_reason`` says why, and the callers skip.

Example::

    reason = loopback.skip_reason()
    if reason is None:
        subprocess.run(loopback.command([sys.executable, "job.py"]), env=loopback.env())
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Sequence

_UP = 'ip link set lo up && exec "$@"'


def command(argv: Sequence[str]) -> list[str]:
    """`argv` run in a new network namespace with loopback up."""
    return ["unshare", "-n", "sh", "-c", _UP, "sh", *map(str, argv)]


def env(**more: str) -> dict[str, str]:
    """This process's environment, Ray's usage reports off, and `more`."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **more}


def skip_reason() -> str | None:
    """None when a loopback-only namespace can be made here, else why not."""
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH: the Ray tests run in a network namespace of their own"
    try:
        done = subprocess.run(command(["true"]), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot make a network namespace ({e})"
    if done.returncode != 0:
        return f"cannot make a network namespace (unshare -n: {done.stderr.strip()})"
    return None


def inside() -> bool:
    """Whether this process's network namespace has no interface but
    loopback (asked of the kernel over netlink: /sys/class/net still lists
    the machine's interfaces inside a new namespace)."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]

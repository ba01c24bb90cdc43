"""What can go wrong in a batch, named once for every executor: the per
example flags a checked function returns beside its outputs, and XLA's
out-of-memory error."""

from __future__ import annotations

#: Bits of a checked function's int32 flag per example: a non-finite output,
#: a failed ``check=``.
FINITE, CHECK = 1, 2


def is_oom(error: BaseException) -> bool:
    """True for XLA's out-of-memory error (RESOURCE_EXHAUSTED)."""
    import jax

    return isinstance(error, jax.errors.JaxRuntimeError) and "RESOURCE_EXHAUSTED" in str(error)

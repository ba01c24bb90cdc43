"""Ctrl-C that Python would lose.

Importing jax takes about a second, and a SIGINT in it can crash the process
(SIGSEGV, seen with jax 0.10 on CPU) or turn into an ImportError of some
extension: :func:`import_jax` imports it with SIGINT held back, so Ctrl-C
during the import arrives, as KeyboardInterrupt, right after it.

A signal's Python handler runs wherever the interpreter next checks for
signals. When that is inside a garbage-collector callback (jax registers one,
and the collector runs constantly while JAX imports, traces and compiles),
the KeyboardInterrupt the handler raises is reported as "Exception ignored"
and lost: the program runs on as if Ctrl-C had never been pressed. This
module notes every such lost interrupt (through ``sys.unraisablehook``,
which still reports it as before) so that long work can raise it at its next
safe point (:func:`raise_lost`).
"""

from __future__ import annotations

import signal
import sys
import threading

_lost = False
_previous_hook = None


def install() -> None:
    """Starts noting lost interrupts; idempotent. Called when jaxbatch is
    imported, before it imports jax."""
    global _previous_hook
    if _previous_hook is None:
        _previous_hook = sys.unraisablehook
        sys.unraisablehook = _note


def import_jax() -> None:
    """Imports jax with SIGINT held back until it is done (main thread, POSIX)."""
    install()
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "pthread_sigmask"
    ):
        import jax  # noqa: F401

        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        import jax  # noqa: F401
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # A held SIGINT arrives now.


def _note(unraisable) -> None:
    global _lost
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _lost = True
    _previous_hook(unraisable)


def raise_lost() -> None:
    """Raises KeyboardInterrupt if an interrupt was lost since the last call."""
    global _lost
    if _lost:
        _lost = False
        raise KeyboardInterrupt

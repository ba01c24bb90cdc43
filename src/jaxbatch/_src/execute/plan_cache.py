"""Compiled memory analyses kept across runs.

Memory planning compiles a vmapped function at a few batch sizes only to
read XLA's memory analysis: the demo's two compilations of all-MiniLM-L6-v2
cost 1.7 s of a 7.9 s run. What a compiled program needs depends on the
program XLA is given and on the compiler, nothing else, so the bytes are
kept per fingerprint of the lowered StableHLO text (which holds the
function, its shapes and dtypes and the batch size) together with the
backend, device kind, jax/jaxlib/jaxbatch versions, XLA's flags and JAX's
compile options. Lowering costs a trace, not a compile (MiniLM: 0.2 s
against 0.6 to 2.3 s). A function's name would not do: a changed function
of the same name would reuse a wrong plan.

XLA's flags are keyed as XLA parsed them, not as ``XLA_FLAGS`` reads now:
XLA reads the variable once, when its first backend starts, so a process
that changes it later still compiles with the old flags, and keying on the
new text stored its plans where a process started with the new flags
found them (planning 127 rows where 42 fit). The running process's flags
are what a fresh ``CompileOptions`` holds (XLA fills its debug options from
the flags it parsed), so that is what the key serialises.

The cache is one small JSON file, ``$JAXBATCH_CACHE_DIR`` or
``$XDG_CACHE_HOME/jaxbatch`` (default ``~/.cache/jaxbatch``), written
atomically by the engine and only after a compilation (a lookup never
writes). ``JAXBATCH_MEMORY_PLAN_CACHE=0`` turns it off. A damaged or
foreign file is ignored with a warning and never written over, and a folder
that cannot be written is logged and skipped: the cache only ever saves
time. Each entry carries the jaxbatch version that wrote it and a checksum
over its key and values: an entry that fails either (edited, truncated,
copied from another release) is ignored with a warning, never used, and
dropped when the file is next written.

The key's ingredients are JAX objects the engine cannot see; the hash is the
engine's (``_core.hash64``), as for every other fingerprint.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import stat
import warnings
from pathlib import Path
from typing import Any

from jaxbatch._src import version

log = logging.getLogger("jaxbatch")

#: Set to 0 (or off, false, no) to neither read nor write the cache.
DISABLE_ENV = "JAXBATCH_MEMORY_PLAN_CACHE"
#: The folder of jaxbatch's caches, instead of $XDG_CACHE_HOME/jaxbatch.
DIR_ENV = "JAXBATCH_CACHE_DIR"
FILE_NAME = "memory-plans.json"
#: The file's layout; a file of another version is ignored, and one of an
#: earlier (1: entries without their version and checksum) replaced.
FORMAT = 2
_EARLIER_FORMATS = (1,)
#: Entries kept; the oldest written go first. A few dozen bytes each.
MAX_ENTRIES = 1024
#: A file larger than this is not one this module wrote: it is not read.
MAX_FILE_BYTES = 1 << 20
_OFF = ("0", "off", "false", "no")
#: JAX's options that reach XLA's build options, not the lowered text.
_COMPILE_OPTIONS = (
    "jax_exec_time_optimization_effort",
    "jax_memory_fitting_effort",
    "jax_optimization_level",
    "jax_memory_fitting_level",
    "jax_disable_most_optimizations",
    "jax_enable_remat_opt_pass",
    "jax_use_shardy_partitioner",
)


@dataclasses.dataclass(frozen=True)
class Entry:
    """A compiled program's peak bytes and whether its analysis misses
    YNNPACK fusions (the warning is given again on a hit)."""

    bytes: int
    uncounted: bool
    version: str = ""  # the jaxbatch that wrote it; "" for this one


# --- the key ---------------------------------------------------------------------------------


def cache_path() -> Path | None:
    """The cache file, or None when the cache is turned off."""
    if os.environ.get(DISABLE_ENV, "").strip().lower() in _OFF:
        return None
    folder = os.environ.get(DIR_ENV)
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = os.path.join(base, "jaxbatch")
    return Path(folder) / FILE_NAME


def program_key(lowered: Any) -> str:
    """A fingerprint of a lowered program and of what compiles it."""
    import jax
    import jaxlib

    device = jax.devices()[0]
    compiler = "\n".join(
        (
            f"jax {jax.__version__} jaxlib {jaxlib.__version__} jaxbatch {_version()}",
            f"{device.platform} {device.device_kind} {_platform_version(device)}",
            f"xla flags {_xla_flags()}",
            *(f"{name}={getattr(jax.config, name, '-')}" for name in _COMPILE_OPTIONS),
        )
    )
    text = f"{compiler}\n{lowered.as_text()}".encode()
    return _hex(text)


def _hex(data: bytes) -> str:
    from jaxbatch import _core

    return f"{_core.hash64(data):016x}{_core.hash64(data, 1):016x}"


def _version() -> str:
    return version.RELEASE  # read at each call (tests stand in another)


def _xla_flags() -> str:
    """XLA's flags as this process's backends run with them: the debug
    options XLA fills a fresh CompileOptions with, from the XLA_FLAGS it
    parsed once (changing the variable later changes nothing), serialised
    and hashed."""
    try:
        from jaxlib import xla_client

        return _hex(xla_client.CompileOptions().SerializeAsString())
    except Exception:  # noqa: BLE001 - a jaxlib without it: the flags as first seen here
        return _FIRST_FLAGS


# XLA_FLAGS when this module was first imported, for a jaxlib that cannot
# say what its backends parsed (closer to them than the variable read later).
_FIRST_FLAGS = os.environ.get("XLA_FLAGS", "")


def _platform_version(device: Any) -> str:
    try:
        return str(device.client.platform_version)
    except Exception:  # noqa: BLE001 - an older client without it: the versions still key it
        return "?"


# --- the file --------------------------------------------------------------------------------

_memo: dict[str, Entry] = {}
_warned: set[str] = set()


def lookup(key: str) -> Entry | None:
    """The entry of `key` in this process or in the cache file (None, as
    for a miss, when the cache is off). An entry that fails its checks is
    a miss, with a warning naming why."""
    path = cache_path()
    if path is None:
        return None
    if key in _memo:
        return _memo[key]
    entry = (_read(path) or {}).get(key)
    if isinstance(entry, str):
        _warn_once(
            f"entry:{path}:{key}",
            f"memory plan cache {path}: the entry of this program {entry}: not used, the plan "
            f"is compiled (and the entry replaced)",
        )
        return None
    if entry is not None:
        _memo[key] = entry
    return entry


def store(key: str, entry: Entry) -> None:
    """Keeps `entry` in this process and, merged with what another process
    may have written meanwhile, in the cache file (its damaged entries
    dropped)."""
    path = cache_path()
    if path is None:
        return
    _memo[key] = entry
    read = _read(path)
    if read is None:  # A file jaxbatch did not write (warned): left as it is.
        return
    entries = {k: e for k, e in read.items() if isinstance(e, Entry)}
    entries.pop(key, None)
    entries[key] = entry  # Last written last: the oldest are dropped first.
    kept = list(entries.items())[-MAX_ENTRIES:]
    data = {"format": FORMAT, "entries": {k: _written(k, e) for k, e in kept}}
    from jaxbatch import _core

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _core.write_file_atomic(str(path), json.dumps(data, separators=(",", ":")).encode())
    except OSError as e:
        _note_once(f"write:{path}", f"memory plan cache: not written ({e}); planning still works")


def _written(key: str, entry: Entry) -> dict[str, Any]:
    """An entry as the file holds it: its values, the version that wrote
    them and their checksum."""
    version = entry.version or _version()
    values = {"bytes": entry.bytes, "uncounted": entry.uncounted, "jaxbatch": version}
    return {**values, "check": _checksum(key, values)}


def _checksum(key: str, values: dict[str, Any]) -> str:
    fields = (key, values["bytes"], values["uncounted"], values["jaxbatch"])
    return _hex(json.dumps(fields, separators=(",", ":")).encode())


def _read(path: Path) -> dict[str, Entry | str] | None:
    """The file's entries, each an Entry or why it cannot be used; {} when
    there is no file (or one of an earlier format, replaced when written),
    and None, with a warning, when it is not one this module wrote (never
    an exception): such a file is never written over."""
    try:
        text = _read_regular(path)
    except (FileNotFoundError, NotADirectoryError):  # No file: nothing was cached.
        return {}
    except OSError as e:
        _ignore(path, f"cannot be read ({e})")
        return None
    if text is None:
        return None
    try:
        data = json.loads(text)
        if isinstance(data, dict) and data.get("format") in _EARLIER_FORMATS:
            return {}  # jaxbatch's own, from before: nothing in it can be checked
        raw = data["entries"] if data.get("format") == FORMAT else None
        if not isinstance(raw, dict):
            raise ValueError(f"expected format {FORMAT} with entries")
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        _ignore(path, f"is not a memory plan cache ({e})")
        return None
    return {key: _entry(key, value) for key, value in raw.items()}


def _read_regular(path: Path) -> bytes | None:
    """The bytes of `path` if it is a regular file of at most MAX_FILE_BYTES
    (a FIFO or device is never waited on or read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            _ignore(path, "is not a regular file")
            return None
        if info.st_size > MAX_FILE_BYTES:
            _ignore(path, f"holds {info.st_size} bytes, over {MAX_FILE_BYTES}")
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)


def _entry(key: Any, value: Any) -> Entry | str:
    """The Entry `value` holds, or why it is unusable: a field missing or
    of the wrong type, a checksum that does not match (edited, truncated),
    or another jaxbatch's."""
    ok_key = isinstance(key, str) and len(key) == 32 and all(c in "0123456789abcdef" for c in key)
    fields = value if isinstance(value, dict) else {}
    size, uncounted = fields.get("bytes"), fields.get("uncounted")
    version, check = fields.get("jaxbatch"), fields.get("check")
    if not ok_key or type(size) is not int or not 0 <= size < 2**63 or type(uncounted) is not bool:
        return "is damaged: expected a hex key, bytes and uncounted"
    if not isinstance(version, str) or not isinstance(check, str):
        return "is damaged: it has no jaxbatch version and checksum"
    if check != _checksum(key, fields):
        return "is damaged: its checksum does not match its values"
    if version != _version():
        return f"was written by jaxbatch {version}, not this {_version()}"
    return Entry(size, uncounted, version)


def _ignore(path: Path, why: str) -> None:
    _warn_once(
        str(path),
        f"memory plan cache {path} {why}: ignored and left as it is, the plan is compiled "
        f"(delete the file, or set {DISABLE_ENV}=0 to turn the cache off)",
    )


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn(message, RuntimeWarning, stacklevel=5)


def _note_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        log.info(message)

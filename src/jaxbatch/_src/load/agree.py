"""Processes agree on what decides their stream before any of them trains.

Under ``jax.distributed`` every process plans the whole data set and takes its
own batches; that gives equal step counts and equal shapes only if every
process was given the same data and settings. When they differ (one example
more on one host, a seed taken from the process index, a token budget from
local memory) the global arrays get different shapes on each process and the
process with fewer steps leaves the others blocked in their next collective.

`agree` makes every process publish the settings that decide its stream in
JAX's own key-value store (the client ``jax.distributed.initialize`` set up),
read every other process's, and raise the same ValueError on every process
when they differ, naming what differs and on which process. Waits are
bounded: a process that never gets there is named in a TimeoutError.

Each caller (the Loader, global_batches) counts its own rounds, so the keys
of one construction never meet another's: every process must build its
``shard="jax"`` Loaders (and call global_batches) in the same order.
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# Seconds a process waits for the others' settings (processes may reach a
# Loader minutes apart, e.g. after reading data of their own), unless the
# environment variable names another.
DEFAULT_TIMEOUT_S = 300.0
TIMEOUT_ENV = "JAXBATCH_AGREE_TIMEOUT"
# Distinct values (and processes with each) named in a message: enough to
# see the pattern on a pod without a page of text.
_MAX_GROUPS = 4
_MAX_PROCESSES = 8
_KEY_PREFIX = "jaxbatch/agree"
# What each caller's rounds are, in messages.
_ROUND_NAMES = {"loader": "its shard='jax' Loader", "global_batches": "its global_batches call"}

_rounds: collections.Counter[str] = collections.Counter()
_rounds_lock = threading.Lock()


# ---------------------------------------------------------------------------------------------
# Pure logic.


def differences(
    settings: Sequence[Mapping[str, str]],
) -> list[tuple[str, list[tuple[str, list[int]]]]]:
    """Each setting whose value is not the same on every process, with its
    values in order of first appearance and the processes holding each."""
    names = list(dict.fromkeys(name for s in settings for name in s))
    out = []
    for name in names:
        groups: dict[str, list[int]] = {}
        for process, s in enumerate(settings):
            groups.setdefault(s.get(name, "nothing"), []).append(process)
        if len(groups) > 1:
            out.append((name, list(groups.items())))
    return out


def loader_settings(loader: Any) -> dict[str, str]:
    """What decides a Loader's steps and shapes, as text, from what it
    already computes: its state (data fingerprint, planner key, seed,
    shuffle, position, shard count) and the options the state does not hold."""
    # Without get_state()'s read-ahead check: an elastic restore through a
    # global_batches iterator agrees on the position it restored.
    state = loader._read_state()
    options = loader.options
    limit = options.max_errors
    rules = "; ".join(
        f"{r.name}: dtype {r.dtype or 'any'}, inner_shape "
        f"{'any' if r.inner_shape is None else list(r.inner_shape)}, "
        f"length {r.min_length}..{r.max_length if r.max_length >= 0 else 'any'}, "
        f"finite={r.finite}"
        for r in loader._schema_rules
    )
    settings = {
        "data": f"{state['num_examples']} examples (fingerprint {state['fingerprint']})",
        "length column": repr(loader._length_column),
        "planner": state["planner"],
        "seed": str(state["seed"]),
        "shuffle": state["shuffle"],
        "block_size": str(state["block_size"]),
        "epochs": str(options.epochs) if options.epochs else "None (forever)",
        "shard count": str(state["shard"][1]),
        "position": f"step {state['step']} of epoch {state['epoch']}"
        + "".join(f", after {t} steps on {n}" for n, t in state.get("earlier_deals", [])),
        "bad records": f"on_error={options.on_error!r}, max_errors={limit}, schema {{{rules}}}",
    }
    mixture = state.get("mixture")
    if mixture is not None:  # Each source's data and place, by name.
        sources = ", ".join(
            f"{s['name']} ({s['size']} examples, fingerprint {s['fingerprint']}, draws "
            f"{s['draws']}, weight {s['weight']})"
            for s in mixture["sources"]
        )
        settings["mixture"] = (
            f"unit={mixture['unit']}, exhaustion={mixture['exhaustion']}, block_size="
            f"{mixture['block_size']}, position {mixture['position']}: {sources}"
        )
    return settings


# ---------------------------------------------------------------------------------------------
# Messages.


def _processes(ids: Sequence[int]) -> str:
    """'process 1', 'processes 0, 2-5', capped at _MAX_PROCESSES runs."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:_MAX_PROCESSES])
    if len(runs) > _MAX_PROCESSES:
        text += f" and {sum(b - a + 1 for a, b in runs[_MAX_PROCESSES:])} more"
    return f"process {text}" if len(ids) == 1 else f"processes {text}"


def mismatch_message(caller: str, diffs: list[tuple[str, list[tuple[str, list[int]]]]]) -> str:
    parts = []
    for name, groups in diffs:
        said = [
            f"{_processes(ids)} {'has' if len(ids) == 1 else 'have'} {value}"
            for value, ids in groups[:_MAX_GROUPS]
        ]
        if len(groups) > _MAX_GROUPS:
            said.append(f"{len(groups) - _MAX_GROUPS} other values elsewhere")
        parts.append(f"different {name}: {', '.join(said)}")
    return (
        f"{caller}: the processes were given {'; '.join(parts)}. Every process must get the "
        f"same data and settings, or their step counts and batch shapes differ (a collective "
        f"waits forever, or the global batch mixes other examples)"
    )


def timeout_message(tag: str, caller: str, missing: Sequence[int], count: int, number: int,
                    timeout: float) -> str:  # fmt: skip
    return (
        f"{caller}: {_processes(missing)} of {count} did not reach {_ROUND_NAMES[tag]} "
        f"number {number + 1} within {timeout:g} s: every process must build its shard='jax' "
        f"Loaders and call global_batches in the same order, and one that failed or stopped "
        f"before never gets there ({TIMEOUT_ENV} sets the wait, in seconds)"
    )


def shard_problem(shards: Sequence[int], shard_count: int) -> str | None:
    """Why processes holding these Loader shard indices (in process order,
    each of `shard_count`) do not cover the data once between them, or None."""
    count = len(shards)
    if shard_count != count:
        return f"every Loader has shard=(index, {shard_count}) but there are {count} processes"
    held: dict[int, list[int]] = {}
    for process, shard in enumerate(shards):
        held.setdefault(shard, []).append(process)
    if len(held) == count:
        return None
    twice = [f"{_processes(ps)} have shard {s}" for s, ps in held.items() if len(ps) > 1]
    unloaded = [s for s in range(count) if s not in held]
    others = f" (nor {len(unloaded) - 1} others)" if len(unloaded) > 1 else ""
    return f"{'; '.join(twice[:_MAX_GROUPS])}, so no process loads shard {unloaded[0]}{others}"


# ---------------------------------------------------------------------------------------------
# The exchange, through JAX's distributed key-value store.


def _timeout_s() -> float:
    text = os.environ.get(TIMEOUT_ENV)
    if text is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError(f"{TIMEOUT_ENV} must be a finite number of seconds > 0, found {text!r}")
    return value


def agree(
    tag: str, caller: str, settings: Callable[[], Mapping[str, str]], mine: Any = None
) -> list[Any]:
    """Raises ValueError on every process unless `settings()` is the same on
    every process; returns each process's `mine` (a JSON value that may
    differ, such as a shard index) in process order. `tag` names the caller's
    key space, `caller` starts the messages. One process, or no
    jax.distributed: nothing to agree with, so `settings` is not called and
    the result is ``[mine]``."""
    import jax
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None or jax.process_count() == 1:
        return [mine]
    me, count = jax.process_index(), jax.process_count()
    payload = {"settings": dict(settings()), "mine": mine}
    with _rounds_lock:
        number = _rounds[tag]
        _rounds[tag] += 1
    folder = f"{_KEY_PREFIX}/{tag}/{number}/"
    client.key_value_set(folder + str(me), json.dumps(payload))
    timeout = _timeout_s()
    answers = _read_others(client, caller, folder, me, count, timeout)
    if isinstance(answers, list):  # The processes that did not answer.
        raise TimeoutError(timeout_message(tag, caller, answers, count, number, timeout))
    # Every process has read round number - 2: each set its key of round
    # number - 1 only after reading all of round number - 2, and this one has
    # read them all. So that round's key can go, keeping the store small.
    if number >= 2:
        client.key_value_delete(f"{_KEY_PREFIX}/{tag}/{number - 2}/{me}")
    answers[me] = payload
    ordered = [answers[p] for p in range(count)]
    diffs = differences([a["settings"] for a in ordered])
    if diffs:
        raise ValueError(mismatch_message(caller, diffs))
    return [a["mine"] for a in ordered]


def _read_others(
    client, caller: str, folder: str, me: int, count: int, timeout: float
) -> dict | list[int]:
    """Every other process's payload under `folder`, by process, waiting at
    most `timeout` seconds in all; or, past it, the processes with none."""
    deadline = time.monotonic() + timeout
    answers = {}
    for process in range(count):
        if process == me:
            continue
        wait_ms = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            answers[process] = json.loads(
                client.blocking_key_value_get(folder + str(process), wait_ms)
            )
        except Exception as e:  # noqa: BLE001 - JaxRuntimeError: a timeout or a lost service
            if "DEADLINE_EXCEEDED" not in str(e):
                raise RuntimeError(
                    f"{caller}: could not read process {process}'s settings: {e}"
                ) from e
            there = {int(key.rsplit("/", 1)[1]) for key, _ in client.key_value_dir_get(folder)}
            return [p for p in range(count) if p not in there]
    return answers

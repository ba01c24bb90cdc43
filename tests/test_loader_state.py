"""A Loader's state that cannot lie (issue 38, item 3): a refused set_state
leaves the Loader, and a device_prefetch iterator over it, exactly as they
were (on main the Loader was left closed); a version-3 state without its
fingerprint is refused naming it (on main it restored onto other data of
the same size); counters at 2^63 - 1 stay there (on main Python showed a
negative count, then refused its own state). The engine decides each
(load/loader.cc, load/state_json.cc); these check what Python sees."""

import numpy as np
import pytest

import jaxbatch as jb

MAX = 2**63 - 1


def dataset(lengths=range(1, 30)):
    return jb.Dataset.from_arrays({"tokens": [np.arange(n, dtype=np.int32) for n in lengths]})


def loader(ds=None, **kw):
    return jb.Loader(ds or dataset(), jb.Pack(40, rows_per_batch=2), seed=3, epochs=2, **kw)


def indices(batches) -> list[list[int]]:
    return [np.asarray(b["example_index"]).tolist() for b in batches]


def refused_states(state: dict) -> dict[str, tuple[dict, str]]:
    """Each hostile variant of `state` and what the refusal says."""
    no_fingerprint = {k: v for k, v in state.items() if k != "fingerprint"}
    return {
        "other seed": ({**state, "seed": 4}, "saved with seed 4 but this loader has seed 3"),
        "no fingerprint": (
            no_fingerprint,
            f"the state \\(version {state.get('version')}\\) lacks 'fingerprint'",
        ),
        "null fingerprint": ({**state, "fingerprint": None}, "lacks 'fingerprint'"),
        "no truncated": (
            {k: v for k, v in state.items() if k != "truncated"},
            "lacks 'truncated'",
        ),
        "step past its epoch": ({**state, "step": 10_000}, "step 10000 is past the end of epoch"),
        "past the end": ({**state, "epoch": 9}, "is past the end of the stream"),
        "other planner": (
            {**state, "planner": "Pack(row_length=41, rows_per_batch=2)"},
            "saved with planner Pack\\(row_length=41",
        ),
        "negative": ({**state, "examples": -1}, "examples must be in \\[0, 2\\*\\*63\\)"),
        "not a dict": ([1], "state must be a dict from get_state"),
    }


@pytest.mark.parametrize("case", list(refused_states({})))
def test_a_refused_set_state_leaves_the_loader_as_it_was(case):
    with loader() as reference:
        whole = indices(reference)
    with loader() as running:
        got = indices(next(running) for _ in range(3))
        state = running.get_state()
        bad, message = refused_states(state)[case]
        with pytest.raises(ValueError, match=message):
            running.set_state(bad)
        assert running.get_state() == state
        got += indices(running)
    assert got == whole


def test_a_refused_set_state_leaves_a_prefetch_iterator_as_it_was():
    with loader() as reference:
        whole = indices(reference)
    with loader() as source:
        batches = jb.device_prefetch(source, size=3)
        got = indices(next(batches) for _ in range(2))
        state = batches.get_state()
        with pytest.raises(ValueError, match="lacks 'fingerprint'"):
            batches.set_state({k: v for k, v in state.items() if k != "fingerprint"})
        assert batches.get_state() == state
        got += indices(batches)
    assert got == whole


def test_a_version_3_state_without_its_fingerprint_does_not_restore_onto_other_data():
    with loader() as saved_from:
        next(saved_from)
        state = saved_from.get_state()
    assert state["version"] >= 3  # every state from version 3 on holds one
    other = dataset(range(2, 31))  # as many examples, other lengths
    with loader(other) as target:
        with pytest.raises(ValueError, match="saved for other data"):
            target.set_state(state)
        del state["fingerprint"]  # on main: restored, checked by the size alone
        with pytest.raises(ValueError, match=f"the state \\(version {state['version']}\\) lacks"):
            target.set_state(state)
        # A version-2 state (saved before fingerprints) is still checked by its size.
        target.set_state({**state, "version": 2})


def test_counters_at_their_limit_stay_there():
    with loader() as fresh:
        next(fresh)
        state = fresh.get_state()
    counters = (
        "batches examples skipped quarantined dropped padding_batches truncated "
        "real_elements padded_elements real_edges padded_edges"
    ).split()
    with loader() as at_limit:
        at_limit.set_state({**state, **dict.fromkeys(counters, MAX)})
        for _ in at_limit:
            own = at_limit.get_state()
            assert all(own[c] == MAX for c in counters), own
        stats = at_limit.stats
        assert stats.batches == stats.examples == MAX
        at_limit.set_state(own)  # its own state: never refused
    with loader() as other:
        other.set_state(own)
        assert other.get_state() == own


def mixture_loader():
    sources = {
        "a": dataset(range(1, 30)),
        "b": dataset(range(5, 25)),
    }
    mixture = jb.Dataset.mix(sources, {"a": 0.5, "b": 0.5}, block_size=8)
    return jb.Loader(mixture, jb.Pack(40, rows_per_batch=2), seed=3, epochs=None)


def test_a_refused_set_state_leaves_a_mixtures_loader_as_it_was():
    """A mixture's part is checked by a stream of its own, so a refusal
    there, or of a key fingerprint a mixture's state never holds, leaves the
    running mixture as it was (on main the Loader was left closed)."""
    with mixture_loader() as reference:
        whole = indices(next(reference) for _ in range(12))
    with mixture_loader() as running:
        got = indices(next(running) for _ in range(5))
        state = running.get_state()
        assert state["version"] >= 3 and state["fingerprint"] is None  # each source's instead
        other_data = [dict(s, fingerprint="0" * 16) for s in state["mixture"]["sources"]]
        bad = {
            "block size": {**state, "mixture": {**state["mixture"], "block_size": 16}},
            "other source data": (
                {**state, "mixture": {**state["mixture"], "sources": other_data}}
            ),
            "a key fingerprint": {**state, "fingerprint": "00000000000000ab"},
            "no mixture": {k: v for k, v in state.items() if k != "mixture"},
            "step past its block": {**state, "step": 10_000},
        }
        messages = {
            "block size": "mixture was drawn with block_size=16",
            "other source data": "source 'a' .* is other data",
            "a key fingerprint": "a mixture's state holds each source's",
            "no mixture": "lacks 'fingerprint'",  # a single dataset's state holds one
            "step past its block": "step 10000 is past the end of epoch",
        }
        for case, variant in bad.items():
            with pytest.raises(ValueError, match=messages[case]):
                running.set_state(variant)
            assert running.get_state() == state, case
        got += indices(next(running) for _ in range(7))
        running.set_state(state)  # its own state restores
        assert indices([next(running)]) == whole[5:6]
    assert got == whole

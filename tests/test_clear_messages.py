"""Messages that say what is refused and why (issue 38, item 5). Each case
failed on main: a refusal that blamed an option not given ("not both"), a
uint64 value past int64 printed as the negative number its cast made, a
patch or a batch too large accepted until the process died."""

import re

import numpy as np
import pytest

import jaxbatch as jb

PAST = 2**63 + 5  # as uint64: 9223372036854775813; cast to int64: negative
PAST_TEXT = re.escape("9223372036854775813, past the largest int64 (2**63 - 1)")


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: jb.Pack({"inputs": 8, "targets": 4}, token_budget=64),
            r"Pack: token_budget=64 with several features \(row_length=\{'inputs': 8, "
            r"'targets': 4\}\) is not supported: a budget sizes batches by one row length",
        ),
        (
            lambda: jb.Pack({"inputs": 8, "targets": 4}, max_shapes=2, rows_per_batch=2),
            r"Pack: max_shapes=2 with several features .* each feature keeps the one row length",
        ),
        (
            lambda: jb.PatchPack(patch=(2**31, 2**31), row_length=8, rows_per_batch=2),
            r"PatchPack: patch 2147483648 x 2147483648 has 4611686018427387904 pixels; at most "
            r"2147483647 fit a patch",
        ),
    ],
    ids=["Pack dict + token_budget", "Pack dict + max_shapes", "PatchPack 2**31 patch"],
)
def test_a_planner_says_what_it_refuses_when_made(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def _graph(n_node, senders=()):
    return {
        "nodes": np.zeros((2, 1), np.float32),
        "edges": np.zeros((len(senders), 1), np.float32),
        "senders": np.array(senders, np.uint64),
        "receivers": np.zeros(len(senders), np.int32),
        "n_node": np.array([n_node], np.uint64),
        "n_edge": np.array([len(senders)], np.uint64),
    }


@pytest.mark.parametrize(
    "make, where",
    [
        (
            lambda: jb.plan(np.array([3, PAST], np.uint64), jb.PadToMax(2)),
            "plan: example 1's length",
        ),
        (
            lambda: jb.plan(np.array([[3, 4], [2, PAST]], np.uint64), jb.PadToMax(2)),
            "plan: example 1's width",
        ),
        (
            lambda: jb.plan([3, 4], jb.PadToMax(2), order=np.array([1, PAST], np.uint64)),
            r"plan: order\[1\]",
        ),
        (
            lambda: jb.Dataset.from_graphs([_graph(2), _graph(PAST)]),
            "Dataset.from_graphs: graph 1's n_node",
        ),
        (
            lambda: jb.Dataset.from_graphs([_graph(2, senders=[0, PAST])]),
            r"Dataset.from_graphs: graph 0's senders\[1\]",
        ),
        (
            lambda: jb.Dataset.from_arrays(
                {"image": (np.zeros((4, 1), np.float32), np.array([[2, 2], [PAST, 0]], np.uint64))},
                axes={"image": ("h", "w")},
            ),
            "column 'image': example 1's h",
        ),
    ],
    ids=["lengths", "grid sizes", "order", "n_node", "a node id", "grid column shapes"],
)
def test_a_uint64_past_int64_is_printed_unsigned(make, where):
    with pytest.raises(ValueError, match=f"{where} is {PAST_TEXT}"):
        make()


def test_a_graph_fit_order_past_int64_is_printed_unsigned():
    graphs = jb.Dataset.from_graphs([_graph(2), _graph(2)])
    with pytest.raises(ValueError, match=rf"GraphBudget.fit: order\[0\] is {PAST_TEXT}"):
        jb.GraphBudget.fit(graphs, graphs=4, order=np.array([PAST], np.uint64))


def test_a_batch_no_machine_holds_is_refused_when_the_loader_is_made():
    """On main the Loader was made and its first batch (35 TB) allocated: the
    process was killed for memory (under a ulimit: std::bad_alloc)."""
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n, dtype=np.int32) for n in (3, 5, 2)]})
    message = (
        r"Loader: one batch of Pack's largest shape \(1024 rows x 2147483647, 4 segments\) "
        r"takes 26388279119872 bytes, more than the \d+ bytes this machine has available"
    )
    with pytest.raises(ValueError, match=message):
        jb.Loader(ds, jb.Pack(2**31 - 1, rows_per_batch=1024))
    with pytest.raises(ValueError, match="holds fewer than prefetch"):
        jb.Loader(ds, jb.Pack(2**31 - 1, rows_per_batch=1024), host_memory_limit=2**30)

"""jaxbatch.ray.Stage in a Ray Data pipeline (``map_batches`` with an actor
pool), run in a loopback-only network namespace (tests/ray_data_worker.py):
one output row per input row, the outputs equal to NumPy's, and every row
the stage did not run marked with its status and reason, none dropped."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray")
pq = pytest.importorskip("pyarrow.parquet")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import loopback  # noqa: E402
from ray_data_worker import ROWS, stage_input  # noqa: E402

import jaxbatch as jb  # noqa: E402
import jaxbatch.ray as jbr  # noqa: E402

WORKER = Path(__file__).parent / "ray_data_worker.py"


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    reason = loopback.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    result = tmp_path_factory.mktemp("stage") / "out.parquet"
    ray_temp = tempfile.mkdtemp(prefix="jbrt-")  # short: Ray's sockets live there
    try:
        done = subprocess.run(
            loopback.command([sys.executable, WORKER, result, ray_temp]),
            env=loopback.env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    finally:
        shutil.rmtree(ray_temp, ignore_errors=True)
    return pq.read_table(result).sort_by("id")


@pytest.mark.timeout(900)
def test_one_row_per_input_row_with_outputs_or_a_status(staged):
    table = stage_input()
    tokens = [np.asarray(t, np.int32) for t in table.column("tokens").to_pylist()]
    assert staged.column("id").to_pylist() == list(range(ROWS))
    assert staged.column("tokens").to_pylist() == table.column("tokens").to_pylist()
    status = np.array(staged.column(jbr.Stage.STATUS).to_pylist())
    reason = staged.column(jbr.Stage.REASON).to_pylist()
    sums = np.array([t.sum() for t in tokens], np.float32)
    too_long = np.array([len(t) > 16 for t in tokens])
    flagged = ~too_long & (sums % 13 == 0)
    expected = np.where(too_long, "skipped", np.where(flagged, "quarantined", "ok"))
    np.testing.assert_array_equal(status, expected)
    assert 0 < flagged.sum() and 0 < too_long.sum() < ROWS
    assert {reason[i] for i in np.nonzero(flagged)[0]} == {"check returned False"}
    assert all("too_long='skip'" in reason[i] for i in np.nonzero(too_long)[0])
    ok = status == "ok"
    assert all(reason[i] is None for i in np.nonzero(ok)[0])
    s = staged.column("s").to_pylist()
    t = staged.column("t").to_pylist()
    for i in range(ROWS):
        if ok[i]:
            assert s[i] == sums[i] and t[i] == (tokens[i] * 2 + 1).tolist(), i
        else:
            assert s[i] is None and t[i] is None, i


def test_stage_refuses_what_it_cannot_run():
    with pytest.raises(TypeError, match="sequence planner"):
        jbr.Stage(lambda e: e, jb.GraphBudget(nodes=64, edges=128, graphs=4))
    with pytest.raises(ValueError, match="on_error must be one of"):
        jbr.Stage(lambda e: e, jb.PadToMax(4), on_error="ignore")

"""bench/bench_scale.py --quick runs: 1 and 2 jax.distributed processes load
the sharded epoch through jb.global_batches, and their shards together hold
every example once (the benchmark raises otherwise). Nothing here depends
on timing."""

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_scale.py"


def test_quick_run_loads_the_whole_epoch_with_one_and_two_processes():
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--force", "--processes", "1", "2",
         "--examples", "2000"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["1", "2"]
    assert rows[0][-1] == "1.00x"
    assert "2000 examples" in proc.stdout and "cores, load average" in proc.stdout

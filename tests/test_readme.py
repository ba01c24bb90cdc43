"""The README's example runs as written."""

import re
from pathlib import Path

import jaxbatch as jb


def test_readme_example_runs():
    text = (Path(__file__).parent.parent / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    plan, batch = scope["plan"], scope["batch"]
    assert isinstance(plan, jb.BatchPlan) and plan.stats.shapes <= 4
    assert batch["tokens"].shape[:2] == batch["tokens_mask"].shape
    assert batch["tokens"].shape[0] * batch["tokens"].shape[1] <= 8192

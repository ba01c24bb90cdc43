"""What every `jaxbatch` command shares: its exit codes, usage errors and
how a job command (run, tokenize) ends."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxbatch._src.base.interrupt import raise_lost
from jaxbatch._src.job.folder import report_path

EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


def usage_error(command: str, error: BaseException) -> int:
    """Reports a usage or input error of `jaxbatch COMMAND` as argparse does:
    one line on stderr (pyarrow's messages can span several), exit 2. A
    message that names the command already (the data it opened) keeps its
    one name."""
    prefix = f"jaxbatch {command}: "
    text = " ".join(str(error).split())
    print(text if text.startswith(prefix) else prefix + text, file=sys.stderr)
    return EXIT_USAGE


def run_job(
    command: str,
    output: str,
    job: Callable[[], Any],
    errors: tuple[type[BaseException], ...] = (ValueError, OSError, ImportError),
) -> int:
    """Runs `job` (jb.run's, jb.tokenize's) for `jaxbatch COMMAND` and
    prints its report and where it is written; Ctrl-C says how to resume
    from `output`, and `errors` are usage errors (exit 2)."""
    try:
        raise_lost()  # Pressed while jax was imported.
        report = job()
    except KeyboardInterrupt:
        print(
            f"\njaxbatch {command}: interrupted; re-run the same command to resume from the last "
            f"checkpoint in {output}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except errors as e:
        return usage_error(command, e)
    print(report)
    print(f"report written to {report_path(Path(report.output))}")
    return 0


def aligned_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Rows under a header and a rule, the first column left-aligned and the
    others right-aligned (numbers), two spaces apart."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        padded = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded)

    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *map(line, rows)])

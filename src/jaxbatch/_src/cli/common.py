"""What every `jaxbatch` command shares: its exit codes and usage errors."""

from __future__ import annotations

import sys

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

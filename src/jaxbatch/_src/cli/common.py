"""What every `jaxbatch` command shares: its exit codes and usage errors."""

from __future__ import annotations

import sys

EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


def usage_error(command: str, error: BaseException) -> int:
    """Reports a usage or input error of `jaxbatch COMMAND` as argparse does:
    one line on stderr (pyarrow's messages can span several), exit 2."""
    print(f"jaxbatch {command}: {' '.join(str(error).split())}", file=sys.stderr)
    return EXIT_USAGE

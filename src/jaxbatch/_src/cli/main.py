"""`jaxbatch`: the command line's entry point, one subcommand per module
(plan, run, tokenize, demo)."""

from __future__ import annotations

import argparse
import sys

from jaxbatch._src.cli.demo.command import add_demo_parser
from jaxbatch._src.cli.plan import add_plan_parser
from jaxbatch._src.cli.run import add_run_parser
from jaxbatch._src.cli.tokenize import add_tokenize_parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jaxbatch",
        description="Fast, safe batch processing for JAX: plan, run, tokenize and demo.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_plan_parser(sub)
    add_run_parser(sub)
    add_tokenize_parser(sub)
    add_demo_parser(sub)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())

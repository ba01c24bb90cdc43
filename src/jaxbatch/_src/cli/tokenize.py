"""`jaxbatch tokenize`.

    jaxbatch tokenize --input FILE --tokenizer TOKENIZER.json --output DIR
                      [--text-column NAME] [--token-column NAME] [--dtype DTYPE]
                      [--no-special-tokens] [--max-length N] [--truncation]
                      [--batch-size N] [--checkpoint-every N]
                      [--on-error raise|skip|quarantine] [--tag TAG]
                      [--overwrite] [--no-progress]

tokenizes the text column of a Parquet, Arrow IPC or JSON Lines file with a
Hugging Face tokenizer into a token column, as a resumable job
(jb.tokenize): re-running the same command after a crash resumes. The
output folder is then a source: jb.Loader(DIR, planner), jaxbatch plan DIR.
"""

from __future__ import annotations

from jaxbatch._src.base.choices import choices
from jaxbatch._src.cli.common import run_job
from jaxbatch._src.job.tokenize import DEFAULT_BATCH_SIZE, DEFAULT_DOCUMENTS_PER_SHARD, tokenize
from jaxbatch._src.load.loader import OnError


def tokenize_command(args) -> int:
    def job():
        return tokenize(
            args.input,
            args.output,
            args.tokenizer,
            text_column=args.text_column,
            token_column=args.token_column,
            dtype=args.dtype,
            add_special_tokens=not args.no_special_tokens,
            max_length=args.max_length,
            truncation=args.truncation,
            batch_size=args.batch_size,
            checkpoint_every=args.checkpoint_every,
            on_error=args.on_error,
            tag=args.tag,
            overwrite=args.overwrite,
            progress=not args.no_progress,
        )

    return run_job("tokenize", args.output, job, (ValueError, TypeError, OSError, ImportError))


def add_tokenize_parser(sub) -> None:
    p = sub.add_parser(
        "tokenize",
        help="tokenize a text column into a token column, as a resumable job",
        description=__doc__.split("\n\n")[2].strip(),
    )
    p.add_argument("--input", required=True, help="Parquet, Arrow IPC or JSON Lines file")
    p.add_argument("--tokenizer", required=True, metavar="FILE", help="a tokenizers tokenizer.json")
    p.add_argument("--output", required=True, metavar="DIR", help="the job's output folder")
    p.add_argument(
        "--text-column",
        metavar="NAME",
        help="the column (JSON Lines: the field) of text (default: the only string column; "
        "'text' in JSON Lines)",
    )
    p.add_argument("--token-column", default="tokens", metavar="NAME")
    p.add_argument(
        "--dtype",
        help="the token ids' integer type (default: the smallest of uint8, uint16, int32, "
        "int64 that holds the vocabulary)",
    )
    p.add_argument("--no-special-tokens", action="store_true", help="add no special tokens")
    p.add_argument("--max-length", type=int, metavar="N", help="tokens a document may have")
    p.add_argument(
        "--truncation",
        action="store_true",
        help="cut documents to --max-length tokens (without: a longer one is an error)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"documents per call of the batch encoder (default {DEFAULT_BATCH_SIZE})",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=DEFAULT_DOCUMENTS_PER_SHARD,
        metavar="N",
        help=f"documents per output shard (default {DEFAULT_DOCUMENTS_PER_SHARD})",
    )
    p.add_argument("--on-error", choices=choices(OnError), default="raise")
    p.add_argument("--overwrite", action="store_true", help="start over in a used folder")
    p.add_argument("--tag", help="a version the job is keyed on")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=tokenize_command)

"""Counts in reports and messages: "1 shard", "2 shards"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and `noun`, plural unless the count is one (`plural` for a
    noun that does not take an s).

    Example::

        counted(1, "shard")  # "1 shard"
        counted(3, "row group")  # "3 row groups"
    """
    return f"{count} {noun if count == 1 else plural or noun + 's'}"

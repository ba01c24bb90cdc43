"""Column names from pytree paths: each leaf's keys joined with a separator.

Joining loses where one key ends: ``{"a/b": x}`` and ``{"a": {"b": y}}``
both spell ``a/b``. Two leaves of one tree that spell the same name would
share one column (one leaf's values lost, both read back as the other's),
so the join is refused for them, naming both leaves' paths.
"""

from __future__ import annotations

from typing import Any


def key_name(key: Any) -> str:
    """A pytree key's text: a dict key, a sequence index, an attribute name."""
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def joined_names(
    paths: list[tuple[Any, ...]], sep: str, prefix: str, who: str, empty: str = ""
) -> list[str]:
    """One name per leaf path (from ``tree_flatten_with_path``): `prefix`
    and the path's keys joined with `sep` (an empty path is `prefix` alone;
    a name that comes out empty is `empty`). Raises ValueError, starting
    ``"<who>: "``, naming two leaves that would make the same name."""
    lead = [prefix] if prefix else []
    names = [sep.join([*lead, *map(key_name, path)]) or empty for path in paths]
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        j = seen.setdefault(name, i)
        if j != i:
            import jax  # only here: a name twice is a mistake, not the common case

            first, second = (jax.tree_util.keystr(paths[k]) or "(the root)" for k in (j, i))
            raise ValueError(
                f"{who}: the leaves at {first} and {second} would both be the column {name!r} "
                f"(their keys joined with {sep!r}); rename a key so that no two leaves' "
                f"joined paths are the same"
            )
    return names

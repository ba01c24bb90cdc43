"""A job's progress bar (tqdm, when it is installed): jb.run's examples and
jb.tokenize's documents, with figures of their own beside the rate."""

from __future__ import annotations

import logging
from typing import Any

from jaxbatch._src.base.optional import install_hint, optional

log = logging.getLogger("jaxbatch")


class ProgressBar:
    """A tqdm bar of `unit`s counting from `initial` (what a resumed job had
    done) to `total` (None: not known ahead); nothing without tqdm or when
    not `enabled`, which `who` logs once with the extra that installs it.

    Example::

        bar = ProgressBar(True, total=1000, initial=0, who="jb.tokenize", unit="doc")
        bar.update(100, tokens=12345)
        bar.close()
    """

    def __init__(self, enabled: bool, total: int | None, initial: int, *, who: str, unit: str):
        self.bar = None
        if not enabled:
            return
        tqdm = optional("tqdm.auto")
        if tqdm is None:
            log.info("%s: no tqdm, so no progress bar: %s", who, install_hint("tqdm"))
            return
        self.bar = tqdm.tqdm(total=total, initial=initial, unit=unit, desc=who, smoothing=0.1)

    def update(self, count: int, **figures: Any) -> None:
        if self.bar is None:
            return
        self.bar.update(count)
        if figures:
            self.bar.set_postfix(figures, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

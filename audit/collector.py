"""Python's cyclic garbage collector, paused while the audit builds millions of objects.

The audit's objects (heads, candidates, records, images, rows) hold no reference cycles,
so reference counting frees them all; the cyclic collector would only walk them again
and again as they pile up, freeing nothing: a fifth of a replay piece's time, and over
half of the driver's walk and merge of a million heads.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The collector off inside, as it was after (a caller that had it off keeps it off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

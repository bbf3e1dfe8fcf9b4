"""What a test reads from the audit's ``report.html``: each chart's PNG, or the page's
plain statement that there was nothing to draw."""

from __future__ import annotations

import base64
import io
import re

import matplotlib.image

from raftka.audit.report import CHART_IDS

CHART_RE = re.compile(
    r"<img alt='(\w+)' src='data:image/png;base64,([A-Za-z0-9+/=]+)'>"
    r"|<p class='nothing' data-chart='(\w+)'>Nothing to draw: no [^<]+ in this history\.</p>"
)


def charts(page: str) -> dict[str, bytes | None]:
    """Each chart's PNG, or None where the page says there was nothing to draw."""
    return {m[0] or m[2]: base64.b64decode(m[1]) if m[0] else None for m in CHART_RE.findall(page)}


def drawn(png: bytes) -> bool:
    """A PNG of a chart's size with something on it (not one flat colour)."""
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    return pixels.shape[0] > 50 and pixels.shape[1] > 50 and float(pixels.std()) > 0


def assert_every_chart_drawn_or_said_empty(page: str) -> dict[str, bytes | None]:
    found = charts(page)
    assert list(found) == list(CHART_IDS)
    assert all(drawn(png) for png in found.values() if png is not None)
    return found

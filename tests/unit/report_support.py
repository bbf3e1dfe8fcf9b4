"""What a test reads from the audit's ``report.html``: each chart's PNG, or the page's
plain statement that there was nothing to draw; the incidents at its top and the rows
behind each."""

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


INCIDENT_ROW_RE = re.compile(r"<tr data-kind='[^']*'>(.*?)</tr>", re.DOTALL)


def first_screen(page: str) -> str:
    """What the page shows before its checks: the verdict, the history and the incidents."""
    return page[: page.index("<h2>Checks</h2>")]


def incident_rows(page: str) -> list[tuple[list[str], str]]:
    """The incidents table at the top: each row's cells (HTML-escaped) and the anchor it links to."""
    rows = []
    for row in INCIDENT_ROW_RE.findall(first_screen(page)):
        link = re.search(r"<a href='#([^']+)'>rows</a>", row)
        assert link is not None, row
        rows.append((re.findall(r"<td>(.*?)</td>", row, re.DOTALL), link.group(1)))
    return rows


def rows_behind(page: str, anchor: str) -> list[str]:
    """The rows listed under an incident's anchor, HTML-escaped."""
    found = re.search(rf"<div id='{re.escape(anchor)}'>(.*?)</div>", page, re.DOTALL)
    assert found is not None, anchor
    return re.findall(r"<li><code>(.*?)</code></li>", found.group(1), re.DOTALL)


def assert_links_resolve(page: str) -> None:
    """Every link within the page targets an id the page holds, and no id is given twice."""
    ids = re.findall(r"\sid='([^']+)'", page)
    assert len(ids) == len(set(ids)), ids
    assert set(re.findall(r"href='#([^']+)'", page)) <= set(ids)

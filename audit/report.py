"""``report.html``: one self-contained page (charts as inline PNGs, no network) for people.

It opens with the verdict and the incidents in time order (controller epochs and how each
ended, partitions offline or under min ISR, groups that rewound or stalled; the most
important ``INCIDENTS_SHOWN`` of a long history, saying how many there are), each linking
to the rows behind it further down; then every check, the headline figures, six charts
(controller leadership with failover gaps, broker fenced periods, partitions offline /
under-replicated / under min ISR over time, elections and ISR churn per topic and per
broker, metadata writes per record type, committed offsets per group) and the first
rows of the violations and controller epochs. Times are seconds from the history's start.
It draws what ``raftka.audit.report_data`` made small of the tables (``ReportData``).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402

from raftka.audit.checks import VIOLATION_SCHEMA  # noqa: E402
from raftka.audit.incidents import INCIDENT_SCHEMA, missing  # noqa: E402

# What the page reads (``raftka.audit.report_data`` makes it with Spark from the tables, and
# nothing here grows with the history): the first rows of two tables, the per-broker table,
# the most important incidents, and the charts' data merged to the pixel, in the types it
# is made in (its Spark test holds them to it): any frames of these columns, empty or odd,
# must make a page.
_INTS = pa.list_(pa.field("element", pa.int32()))
_SPANS = [("start_ms", pa.int64()), ("duration_ms", pa.int64())]
SHOWN: dict[str, pa.Schema] = {
    "controller_epochs": pa.schema([
        ("epoch", pa.int32()), ("leader", pa.int32()), ("voters", _INTS), ("start_offset", pa.int64()),
        ("end_offset", pa.int64()), ("start_ms", pa.int64()), ("end_ms", pa.int64()), ("tenure_ms", pa.int64()),
        ("gap_before_ms", pa.int64()), ("failed_elections_before", pa.int32()), ("records", pa.int64()),
        pa.field("committed", pa.bool_(), nullable=False),
    ]),
    "leadership": pa.schema([("leader", pa.int32()), *_SPANS]),  # committed epochs
    "leaderless": pa.schema(_SPANS),  # the gaps before them
    "broker_spans": pa.schema([("broker", pa.int32()), pa.field("state", pa.string(), nullable=False),
                               pa.field("restart", pa.bool_(), nullable=False), *_SPANS]),
    "partition_levels": pa.schema([pa.field("condition", pa.string(), nullable=False), ("bucket_ms", pa.int64()),
                                   ("peak", pa.int64()), ("last", pa.int64())]),
    "churn_by_topic": pa.schema([("topic", pa.string()),
                                 *(pa.field(c, pa.int64(), nullable=False)
                                   for c in ("elections", "isr_shrinks", "isr_expands"))]),
    "leadership_by_broker": pa.schema([
        ("broker", pa.int32()), ("partition_ms_led", pa.int64()),
        *(pa.field(c, pa.int64(), nullable=False)
          for c in ("elections_won", "unclean_elections_won", "leaderships_lost", "isr_removals")),
    ]),
    "violations": VIOLATION_SCHEMA,
    "incidents": INCIDENT_SCHEMA,
}  # fmt: skip
ROWS_SHOWN = 200  # of the violations and the controller epochs
INCIDENTS_SHOWN = 200
CHURN_TOPICS = 15
SERIES_POINTS_MARKED = 20  # a group with fewer points in the committed-offsets chart gets markers
CHART_IDS = ("leadership", "fenced", "partition_states", "churn", "write_rate", "committed")
# Labels are names from the history (a consumer group may be called "$\\x$"): text, never
# mathtext, which would fail the whole report on a group name it cannot parse.
_PLAIN_TEXT = {"text.parse_math": False}
_CONDITION_COLORS = {"offline": "#c0392b", "under_min_isr": "#e67e22", "under_replicated": "#f1c40f"}
TIME_CONDITIONS = tuple(_CONDITION_COLORS)


class ReportData(NamedTuple):
    """Everything the page shows: frames of ``SHOWN``, the write rate and committed offsets
    per time bucket, how many incidents there are (the page shows ``INCIDENTS_SHOWN``), and
    the headline figures."""

    shown: dict[str, pd.DataFrame]
    write_rate: pd.DataFrame
    committed: pd.DataFrame
    incidents_total: int
    headline: dict[str, Any]


def write(path: Path, summary: dict[str, Any], data: ReportData) -> None:
    start, end = summary["history"]["start_ms"] or 0, summary["history"]["end_ms"]
    charts = charts_png(data, start, end)
    path.write_text(_page(summary, data, charts), encoding="utf-8")


class Chart(NamedTuple):
    """One chart: its PNG, or (``png`` None) what the history lacked for it to show."""

    png: bytes | None
    nothing: str | None


def charts_png(data: ReportData, start_ms: int, end_ms: int | None = None) -> dict[str, Chart]:
    """Every chart by id (``CHART_IDS``). A maker returns what was missing when it found
    nothing to draw: the page says so in words instead of showing an empty frame. The
    charts over time span the whole history (``end_ms``), so they line up and a broker
    fenced for a second at its registration is not drawn as fenced throughout."""
    shown = data.shown
    makers: dict[str, Callable[[Any], str | None]] = {
        "leadership": lambda ax: _leadership(ax, shown["leadership"], shown["leaderless"], start_ms),
        "fenced": lambda ax: _fenced(ax, shown["broker_spans"], start_ms),
        "partition_states": lambda ax: _partition_states(ax, shown["partition_levels"], start_ms, end_ms),
        "churn": lambda axes: _churn(axes, shown["churn_by_topic"], shown["leadership_by_broker"]),
        "write_rate": lambda ax: _write_rate(ax, data.write_rate, start_ms),
        "committed": lambda ax: _committed(ax, data.committed, start_ms),
    }
    charts = {}
    for chart_id in CHART_IDS:
        with plt.rc_context(_PLAIN_TEXT):
            charts[chart_id] = _chart(chart_id, makers[chart_id], start_ms, end_ms)
    return charts


def _chart(chart_id: str, maker: Callable[[Any], str | None], start_ms: int, end_ms: int | None) -> Chart:
    fig, ax = (
        plt.subplots(1, 2, figsize=(11, 3.6)) if chart_id == "churn" else plt.subplots(figsize=(11, 3.2))
    )
    try:
        nothing = maker(ax)
        if nothing is None and chart_id != "churn" and end_ms is not None:
            _span_history(ax, _seconds(end_ms, start_ms))
        return Chart(None if nothing is not None else _png(fig), nothing)
    finally:
        plt.close(fig)


def _span_history(ax: Any, end_s: float) -> None:
    """Widen the time axis to the history's start and end; never narrower than what is drawn."""
    left, right = ax.get_xlim()
    ax.set_xlim(min(left, 0.0), max(right, end_s))


def _png(fig: Any) -> bytes:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


def _seconds(ms: Any, start_ms: int) -> Any:
    return (ms - start_ms) / 1000.0


def _known(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """The rows a chart can place: every column it draws from holds a value (the tables'
    columns are nullable, and one row without a time or an id must not sink the chart)."""
    return frame.dropna(subset=list(columns))


def _no(what: str) -> str:
    return f"no {what} in this history"


def _empty_panel(ax: Any, what: str) -> None:
    """One panel of two with nothing to show, while its neighbour has something."""
    ax.text(0.5, 0.5, _no(what), ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _leadership(ax: Any, spans: pd.DataFrame, gaps: pd.DataFrame, start_ms: int) -> str | None:
    spans = _known(spans, "leader", "start_ms")
    if spans.empty:
        return _no("committed epoch with a leader")
    leaders = sorted(spans["leader"].astype(int).unique())
    for y, leader in enumerate(leaders):
        ax.broken_barh(_bars(spans[spans["leader"] == leader], start_ms), (y - 0.35, 0.7), color="#2e86c1")
    gaps = _known(gaps, "start_ms")
    # one collection of bands over the whole height, as axvspan draws each (10,000 spans: 0.1 s, not 7)
    ax.broken_barh(
        _bars(gaps, start_ms), (0, 1), transform=ax.get_xaxis_transform(), color="#e74c3c", alpha=0.35
    )
    ax.set_yticks(range(len(leaders)), [f"node {leader}" for leader in leaders])
    ax.set_xlabel("seconds since the history's start")
    ax.set_title("Controller leadership (blue: leading; red: leaderless gap before a new epoch)")
    return None


def _bars(spans: pd.DataFrame, start_ms: int) -> list[tuple[float, float]]:
    """Spans (``start_ms``, ``duration_ms``) as bars in seconds, each at least a millisecond wide."""
    return [
        (_seconds(r.start_ms, start_ms), max(_or(r.duration_ms, 0), 1) / 1000.0) for r in spans.itertuples()
    ]


def _or(value: Any, default: float) -> Any:
    return default if value != value else value  # NaN


def _fenced(ax: Any, brokers: pd.DataFrame, start_ms: int) -> str | None:
    brokers = _known(brokers, "broker", "start_ms")
    if brokers.empty:
        return _no("broker")
    ids = sorted(brokers["broker"].astype(int).unique())
    restarted = brokers["restart"].eq(True)  # null is not
    for y, broker in enumerate(ids):
        mine = brokers[(brokers["broker"] == broker) & (brokers["state"] == "FENCED")]
        ax.broken_barh(_bars(mine, start_ms), (y - 0.35, 0.7), color="#c0392b")
        restarts = brokers[(brokers["broker"] == broker) & restarted]
        ax.plot(_seconds(restarts["start_ms"], start_ms), [y] * len(restarts), "k|", markersize=14)
    ax.set_yticks(range(len(ids)), [f"broker {b}" for b in ids])
    ax.set_xlabel("seconds since the history's start")
    ax.set_title("Broker fenced periods (red; a tick marks a restart: a new registration)")
    return None


def _partition_states(ax: Any, levels: pd.DataFrame, start_ms: int, end_ms: int | None) -> str | None:
    """Each condition's count per pixel column: up to the most at once in it, then how many
    at its end (a spike one column wide where partitions came and went within it)."""
    levels = _known(levels, "condition", "bucket_ms", "peak", "last")
    shown = False
    for condition, color in _CONDITION_COLORS.items():
        mine = levels[levels["condition"] == condition].sort_values("bucket_ms")
        if mine.empty:
            continue
        times = [start_ms, *(t for t in mine["bucket_ms"] for _ in (0, 1))]
        counts = [0, *(c for pair in zip(mine["peak"], mine["last"], strict=True) for c in pair)]
        if end_ms is not None and end_ms > times[-1]:
            times, counts = [*times, end_ms], [*counts, counts[-1]]
        ax.step(_seconds(pd.Series(times), start_ms), counts, where="post", color=color,
                label=condition.replace("_", " "))  # fmt: skip
        shown = True
    if not shown:
        return _no("offline, under-replicated or under-min-ISR partition")
    ax.legend(loc="upper right")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("partitions")
    ax.set_xlabel("seconds since the history's start")
    ax.set_title("Partitions offline / under-replicated / under min ISR over time")
    return None


CHURN_BY_TOPIC = "leader election or ISR change"
CHURN_BY_BROKER = "election won, leadership lost or ISR removal"


def _churn(axes: Any, by_topics: pd.DataFrame, leadership: pd.DataFrame) -> str | None:
    """Per topic (the busiest ``CHURN_TOPICS``, counted by Spark) and per broker; a history
    where no partition changed leader or ISR (topics created, configs and commits: the
    common case) has nothing to count in either."""
    by_topic, by_broker = axes
    counts = (
        _known(by_topics, "topic")
        .set_index("topic")[["elections", "isr_shrinks", "isr_expands"]]
        .rename(columns={"isr_shrinks": "ISR shrinks", "isr_expands": "ISR expands"})
    )
    counts = counts[counts.sum(axis=1) > 0]
    brokers = _known(leadership, "broker").set_index("broker")[
        ["elections_won", "leaderships_lost", "isr_removals"]
    ]
    brokers = brokers[brokers.fillna(0).sum(axis=1) > 0]
    if counts.empty and brokers.empty:
        return _no(f"{CHURN_BY_TOPIC}, {CHURN_BY_BROKER}")
    if counts.empty:
        _empty_panel(by_topic, CHURN_BY_TOPIC)
    else:
        counts = counts.loc[
            counts.sum(axis=1).sort_values(ascending=False, kind="stable").index[:CHURN_TOPICS]
        ]
        counts.plot.bar(ax=by_topic, rot=30)
        by_topic.set_title(f"Elections and ISR churn per topic (top {CHURN_TOPICS})")
    if brokers.empty:
        _empty_panel(by_broker, CHURN_BY_BROKER)
    else:
        brokers.index = [f"broker {int(b)}" for b in brokers.index]
        brokers.plot.bar(ax=by_broker, rot=0)
        by_broker.set_title("Elections and ISR removals per broker")
    return None


def _write_rate(ax: Any, rate: pd.DataFrame, start_ms: int) -> str | None:
    rate = _known(rate, "bucket_ms", "type", "count")
    if rate.empty:
        return _no("record")
    width = rate.attrs.get("width_ms", 1000)
    table = rate.pivot_table(index="bucket_ms", columns="type", values="count", fill_value=0).sort_index()
    buckets = range(int(table.index.min()), int(table.index.max()) + width, width)
    table = table.reindex(buckets, fill_value=0)  # a quiet bucket is zero, not a line between neighbours
    table = table[table.sum().sort_values(ascending=False).index]
    x = _seconds(table.index.to_series(), start_ms)
    palette = matplotlib.colormaps["tab20"].colors  # the default cycle's 10 colours would repeat
    ax.stackplot(
        x, *(table[c] / (width / 1000.0) for c in table.columns), labels=list(table.columns), step="post",
        colors=[palette[i % len(palette)] for i in range(len(table.columns))],
    )  # fmt: skip
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    ax.set_ylabel("records / s")
    ax.set_xlabel("seconds since the history's start")
    ax.set_title(f"Metadata write rate by record type ({width // 1000} s buckets)")
    return None


def _committed(ax: Any, committed: pd.DataFrame, start_ms: int) -> str | None:
    committed = _known(committed, "group", "bucket_ms", "committed")
    if committed.empty:
        return _no("offset commit")
    for group in sorted(committed["group"].unique())[:12]:
        mine = committed[committed["group"] == group]
        few = len(mine) < SERIES_POINTS_MARKED  # a line of one point draws nothing
        ax.plot(_seconds(mine["bucket_ms"], start_ms), mine["committed"], label=group, drawstyle="steps-post",
                marker="o" if few else None, markersize=4)  # fmt: skip
    ax.legend(loc="upper left", fontsize=7, ncol=4)
    ax.set_ylabel("sum of committed offsets")
    ax.set_xlabel("seconds since the history's start")
    ax.set_title("Committed offsets per group (the sum over its partitions; a drop is a rewind)")
    return None


# the page ------------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}.pass{color:#1e8449;font-weight:bold}.fail{color:#c0392b;font-weight:bold}
img{max-width:100%;border:1px solid #eee;margin-bottom:1em}.verdict{font-size:1.4em}
.nothing{color:#666;font-style:italic}
.incidents td:nth-child(-n+2){white-space:nowrap}
"""
_CAPTIONS = {
    "leadership": "Which controller led, epoch by epoch; red bands are the windows without a leader "
    "(from the old leader's last batch to the new LeaderChange).",
    "fenced": "When each broker was fenced (session lapsed, controlled shutdown, restart).",
    "partition_states": "How many partitions were offline, under-replicated or under their min ISR.",
    "churn": "Leader elections and ISR shrinks and expands, per topic and per broker.",
    "write_rate": "Records appended to the metadata log per second, by type.",
    "committed": "Consumer progress per group, as the controllers recorded it.",
}


def _page(summary: dict[str, Any], data: ReportData, charts: dict[str, Chart]) -> str:
    tables = data.shown
    verdict = summary["status"]
    history = summary["history"]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>raftka audit: {verdict}</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>raftka metadata audit</h1>",
        f"<p class='verdict'>Verdict: <span class='{'pass' if verdict == 'passed' else 'fail'}'>{verdict}</span>"
        f" ({summary['violations']['error']} errors, {summary['violations']['warning']} warnings, "
        f"{summary['violations']['info']} notes)</p>",
        f"<p>Nodes {', '.join(summary['inputs']['nodes'])} ({len(summary['inputs']['files'])} files); offsets "
        f"{history['start_offset']} to {history['end_offset']} ({history['records']} records), "
        f"{_utc(history['start_ms'])} to {_utc(history['end_ms'])}; voters {history['voters']}.</p>",
        *_incidents(tables["incidents"], data.incidents_total, history["start_ms"]),
        "<h2>Checks</h2>",
        _table(pd.DataFrame(summary["checks"])[["check", "passed", "error", "warning", "info", "what"]]),
        "<h2>Headline figures</h2>",
        _table(pd.DataFrame([{"figure": k, "value": v} for k, v in summary["headline"].items()])),
    ]
    for chart_id in CHART_IDS:
        chart = charts[chart_id]
        parts.append(f"<h2 id='{chart_id}'>{html.escape(_CAPTIONS[chart_id])}</h2>")
        if chart.png is None:
            parts.append(f"<p class='nothing' data-chart='{chart_id}'>Nothing to draw: "
                         f"{html.escape(str(chart.nothing))}.</p>")  # fmt: skip
        else:
            data = base64.b64encode(chart.png).decode()
            parts.append(f"<img alt='{chart_id}' src='data:image/png;base64,{data}'>")
    parts += _rows_behind(tables["incidents"])
    parts += ["<h2>Violations</h2>", _table(tables["violations"].head(ROWS_SHOWN))]
    parts += ["<h2>Controller epochs</h2>", _table(tables["controller_epochs"].head(ROWS_SHOWN))]
    parts.append("</body></html>")
    return "\n".join(parts)


INCIDENTS_ID = "incidents"
NO_INCIDENTS = "No incidents in this history."
INCIDENTS_TABLE = "tables/incidents/"  # beside report.html
_INCIDENT_COLUMNS = ("time (UTC)", "since start", "what", "how long", "why", "ended", "rows")


def _incident_id(position: int) -> str:
    """The anchor of an incident's rows: by its place on the page, as its fields are names
    and words from the history, any of which may repeat."""
    return f"incident-{position + 1}"


def _incidents(incidents: pd.DataFrame, total: int, start_ms: int | None) -> list[str]:
    """The first screen: what happened when, plainly, each row linking to the rows behind it;
    of ``total``, the ``INCIDENTS_SHOWN`` most important (``incidents``, in time order)."""
    parts = [f"<h2 id='{INCIDENTS_ID}'>Incidents</h2>"]
    incidents = incidents.head(INCIDENTS_SHOWN)
    if incidents.empty:
        return [*parts, f"<p class='nothing' data-section='{INCIDENTS_ID}'>{NO_INCIDENTS}</p>"]
    head = "".join(f"<th>{c}</th>" for c in _INCIDENT_COLUMNS)
    rows = []
    for position, incident in enumerate(incidents.itertuples(index=False)):
        since = (
            ""
            if start_ms is None or missing(incident.start_ms)
            else f"+{(incident.start_ms - start_ms) / 1000:.3f} s"
        )
        cells = (_utc_ms(incident.start_ms), since, incident.what, _how_long(incident.duration_ms, incident.open),
                 incident.why, incident.ended)  # fmt: skip
        link = f"<a href='#{_incident_id(position)}'>rows</a>"
        rows.append(
            f"<tr data-kind='{html.escape(str(incident.kind), quote=True)}'>"
            + "".join(f"<td>{html.escape(_cell(c))}</td>" for c in cells) + f"<td>{link}</td></tr>"
        )  # fmt: skip
    parts.append(f"<table class='incidents'><tr>{head}</tr>{''.join(rows)}</table>")
    if total > len(incidents):
        parts.append(
            f"<p class='more'>The {len(incidents)} most important of {total:,} incidents (partitions offline "
            "first, then under min ISR, controllers, groups; the longest first), in time order: every one is "
            f"in <a href='{INCIDENTS_TABLE}'>{INCIDENTS_TABLE}</a> (Parquet).</p>"
        )
    return parts


def _rows_behind(incidents: pd.DataFrame) -> list[str]:
    """Each incident's rows of the other tables, under the anchor its link targets."""
    if incidents.empty:
        return []
    parts = ["<h2 id='incident-rows'>Rows behind each incident</h2>"]
    for position, incident in enumerate(incidents.head(INCIDENTS_SHOWN).itertuples(index=False)):
        lines = [] if missing(incident.rows) else [line for line in incident.rows if not missing(line)]
        items = (
            "".join(f"<li><code>{html.escape(str(line))}</code></li>" for line in lines) or "<li>none</li>"
        )
        parts.append(
            f"<div id='{_incident_id(position)}'><h3>{position + 1}. {html.escape(_cell(incident.what))}</h3>"
            f"<ul>{items}</ul><a href='#{INCIDENTS_ID}'>back to the incidents</a></div>"
        )
    return parts


def _how_long(duration_ms: Any, still: Any) -> str:
    said = "" if missing(duration_ms) else _duration(int(duration_ms))
    if not missing(still) and bool(still):
        return f"{said}, still at the history's end" if said else "still at the history's end"
    return said


def _duration(ms: int) -> str:
    if abs(ms) < 1_000:
        return f"{ms} ms"
    if abs(ms) < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes} min {seconds} s"


def _utc_ms(ms: Any) -> str:
    if missing(ms):
        return "?"
    return pd.to_datetime(int(ms), unit="ms", utc=True).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    return f"<table><tr>{head}</tr>{rows}</table>"


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # a count in a column pandas made float
    if hasattr(value, "tolist"):
        return str(value.tolist())
    return str(value)


def _utc(ms: int | None) -> str:
    return "?" if ms is None else pd.to_datetime(ms, unit="ms", utc=True).strftime("%Y-%m-%d %H:%M:%S UTC")

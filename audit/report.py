"""``report.html``: one self-contained page (charts as inline PNGs, no network) for people.

It opens with the verdict and every check, then the headline figures, six charts
(controller leadership with failover gaps, broker fenced periods, partitions offline /
under-replicated / under min ISR over time, elections and ISR churn per topic and per
broker, metadata writes per record type, committed offsets per group) and the first
rows of the violations and controller epochs. Times are seconds from the history's start.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

# The tables the summary and the page read, and of the two long ones only the columns they
# count and chart (a 10-million-record history has about a million rows of each).
TABLES_SHOWN: dict[str, tuple[str, ...] | None] = {
    "controller_epochs": None,
    "partition_transitions": ("topic", "cause", "clean", "isr_change"),
    "partition_intervals": ("condition", "start_ms", "end_ms", "duration_ms"),
    "broker_timeline": None,
    "leadership_by_broker": None,
    "violations": None,
}
ROWS_SHOWN = 200
SERIES_POINTS_MARKED = 20  # a group with fewer points in the committed-offsets chart gets markers
CHART_IDS = ("leadership", "fenced", "partition_states", "churn", "write_rate", "committed")
_CONDITION_COLORS = {"offline": "#c0392b", "under_min_isr": "#e67e22", "under_replicated": "#f1c40f"}


def write(
    path: Path,
    summary: dict[str, Any],
    tables: dict[str, pd.DataFrame],
    write_rate: pd.DataFrame,
    committed: pd.DataFrame,
) -> None:
    start = summary["history"]["start_ms"] or 0
    charts = charts_png(tables, write_rate, committed, start)
    path.write_text(_page(summary, tables, charts), encoding="utf-8")


def charts_png(
    tables: dict[str, pd.DataFrame], write_rate: pd.DataFrame, committed: pd.DataFrame, start_ms: int
) -> dict[str, bytes]:
    """Every chart as PNG bytes, by id (``CHART_IDS``)."""
    makers = {
        "leadership": lambda ax: _leadership(ax, tables["controller_epochs"], start_ms),
        "fenced": lambda ax: _fenced(ax, tables["broker_timeline"], start_ms),
        "partition_states": lambda ax: _partition_states(ax, tables["partition_intervals"], start_ms),
        "churn": None,
        "write_rate": lambda ax: _write_rate(ax, write_rate, start_ms),
        "committed": lambda ax: _committed(ax, committed, start_ms),
    }
    charts = {}
    for chart_id in CHART_IDS:
        if chart_id == "churn":
            fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
            _churn(axes, tables["partition_transitions"], tables["leadership_by_broker"])
        else:
            fig, ax = plt.subplots(figsize=(11, 3.2))
            makers[chart_id](ax)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=90)
        plt.close(fig)
        charts[chart_id] = buffer.getvalue()
    return charts


def _seconds(ms: Any, start_ms: int) -> Any:
    return (ms - start_ms) / 1000.0


def _empty(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this history", ha="center", va="center", transform=ax.transAxes)
    ax.set_yticks([])


def _leadership(ax: Any, epochs: pd.DataFrame, start_ms: int) -> None:
    committed = epochs[epochs["committed"]].sort_values("epoch")
    if committed.empty:
        return _empty(ax, "committed epoch")
    leaders = sorted(committed["leader"].dropna().astype(int).unique())
    for y, leader in enumerate(leaders):
        mine = committed[committed["leader"] == leader]
        spans = [(_seconds(r.start_ms, start_ms), max(r.tenure_ms, 1) / 1000.0) for r in mine.itertuples()]
        ax.broken_barh(spans, (y - 0.35, 0.7), color="#2e86c1")
    gaps = committed[committed["gap_before_ms"] > 0]  # NaN is not
    # one collection of bands over the whole height, as axvspan draws each (10,000 spans: 0.1 s, not 7)
    ax.broken_barh(
        [
            (_seconds(r.start_ms - r.gap_before_ms, start_ms), r.gap_before_ms / 1000.0)
            for r in gaps.itertuples()
        ],
        (0, 1),
        transform=ax.get_xaxis_transform(),
        color="#e74c3c",
        alpha=0.35,
    )
    ax.set_yticks(range(len(leaders)), [f"node {leader}" for leader in leaders])
    ax.set_xlabel("seconds since the history's start")
    ax.set_title("Controller leadership (blue: leading; red: leaderless gap before a new epoch)")


def _fenced(ax: Any, brokers: pd.DataFrame, start_ms: int) -> None:
    if brokers.empty:
        return _empty(ax, "broker")
    ids = sorted(brokers["broker"].unique())
    for y, broker in enumerate(ids):
        mine = brokers[(brokers["broker"] == broker) & (brokers["state"] == "FENCED")]
        spans = [(_seconds(r.start_ms, start_ms), max(r.duration_ms, 1) / 1000.0) for r in mine.itertuples()]
        ax.broken_barh(spans, (y - 0.35, 0.7), color="#c0392b")
        restarts = brokers[(brokers["broker"] == broker) & brokers["restart"]]
        ax.plot(_seconds(restarts["start_ms"], start_ms), [y] * len(restarts), "k|", markersize=14)
    ax.set_yticks(range(len(ids)), [f"broker {b}" for b in ids])
    ax.set_xlabel("seconds since the history's start")
    ax.set_title("Broker fenced periods (red; a tick marks a restart: a new registration)")


def _partition_states(ax: Any, intervals: pd.DataFrame, start_ms: int) -> None:
    shown = False
    for condition, color in _CONDITION_COLORS.items():
        mine = intervals[intervals["condition"] == condition]
        if mine.empty:
            continue
        steps = pd.concat([
            pd.DataFrame({"t": [start_ms], "d": [0]}),
            pd.DataFrame({"t": mine["start_ms"], "d": 1}), pd.DataFrame({"t": mine["end_ms"], "d": -1}),
        ]).sort_values(["t", "d"])  # fmt: skip
        ax.step(
            _seconds(steps["t"], start_ms),
            steps["d"].cumsum(),
            where="post",
            color=color,
            label=condition.replace("_", " "),
        )
        shown = True
    if not shown:
        return _empty(ax, "offline, under-replicated or under-min-ISR partition")
    ax.legend(loc="upper right")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("partitions")
    ax.set_xlabel("seconds since the history's start")
    ax.set_title("Partitions offline / under-replicated / under min ISR over time")


def _churn(axes: Any, transitions: pd.DataFrame, leadership: pd.DataFrame) -> None:
    by_topic, by_broker = axes
    if transitions.empty:
        _empty(by_topic, "partition change")
    else:
        counts = pd.DataFrame({
            "elections": transitions[transitions["cause"] == "election"].groupby("topic").size(),
            "ISR shrinks": transitions[transitions["isr_change"] == "shrink"].groupby("topic").size(),
            "ISR expands": transitions[transitions["isr_change"] == "expand"].groupby("topic").size(),
        }).fillna(0)  # fmt: skip
        counts = counts.loc[counts.sum(axis=1).sort_values(ascending=False).index[:15]]
        counts.plot.bar(ax=by_topic, rot=30)
        by_topic.set_title("Elections and ISR churn per topic (top 15)")
    if leadership.empty:
        _empty(by_broker, "broker")
    else:
        frame = leadership.set_index("broker")[["elections_won", "leaderships_lost", "isr_removals"]]
        frame.index = [f"broker {b}" for b in frame.index]
        frame.plot.bar(ax=by_broker, rot=0)
        by_broker.set_title("Elections and ISR removals per broker")


def _write_rate(ax: Any, rate: pd.DataFrame, start_ms: int) -> None:
    if rate.empty:
        return _empty(ax, "record")
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


def _committed(ax: Any, committed: pd.DataFrame, start_ms: int) -> None:
    if committed.empty:
        return _empty(ax, "offset commit")
    for group in sorted(committed["group"].unique())[:12]:
        mine = committed[committed["group"] == group]
        few = len(mine) < SERIES_POINTS_MARKED  # a line of one point draws nothing
        ax.plot(_seconds(mine["bucket_ms"], start_ms), mine["committed"], label=group, drawstyle="steps-post",
                marker="o" if few else None, markersize=4)  # fmt: skip
    ax.legend(loc="upper left", fontsize=7, ncol=4)
    ax.set_ylabel("sum of committed offsets")
    ax.set_xlabel("seconds since the history's start")
    ax.set_title("Committed offsets per group (the sum over its partitions; a drop is a rewind)")


# the page ------------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}.pass{color:#1e8449;font-weight:bold}.fail{color:#c0392b;font-weight:bold}
img{max-width:100%;border:1px solid #eee;margin-bottom:1em}.verdict{font-size:1.4em}
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


def _page(summary: dict[str, Any], tables: dict[str, pd.DataFrame], charts: dict[str, bytes]) -> str:
    verdict = summary["status"]
    history = summary["history"]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>raftka audit: {verdict}</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>raftka metadata audit</h1>",
        f"<p class='verdict'>Verdict: <span class='{'pass' if verdict == 'passed' else 'fail'}'>{verdict}</span>"
        f" ({summary['violations']['error']} errors, {summary['violations']['warning']} warnings, "
        f"{summary['violations']['info']} notes)</p>",
        f"<p>Nodes {', '.join(summary['inputs']['nodes'])}, {len(summary['inputs']['files'])} files; offsets "
        f"{history['start_offset']} to {history['end_offset']} ({history['records']} records), "
        f"{_utc(history['start_ms'])} to {_utc(history['end_ms'])}; voters {history['voters']}.</p>",
        "<h2>Checks</h2>",
        _table(pd.DataFrame(summary["checks"])[["check", "passed", "error", "warning", "info", "what"]]),
        "<h2>Headline figures</h2>",
        _table(pd.DataFrame([{"figure": k, "value": v} for k, v in summary["headline"].items()])),
    ]
    for chart_id in CHART_IDS:
        data = base64.b64encode(charts[chart_id]).decode()
        parts.append(f"<h2 id='{chart_id}'>{html.escape(_CAPTIONS[chart_id])}</h2>")
        parts.append(f"<img alt='{chart_id}' src='data:image/png;base64,{data}'>")
    parts += ["<h2>Violations</h2>", _table(tables["violations"].head(ROWS_SHOWN))]
    parts += ["<h2>Controller epochs</h2>", _table(tables["controller_epochs"].head(ROWS_SHOWN))]
    parts.append("</body></html>")
    return "\n".join(parts)


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

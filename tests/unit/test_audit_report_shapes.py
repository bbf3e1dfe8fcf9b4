"""The report and the summary make a page from any data, without a JVM: frames of every
shape (empty, one row, all zeros, columns of nulls, one time bucket) built from the schemas
the job makes the page's data in (``report.SHOWN``), read back the way the job reads
them (Arrow to pandas). Every chart is drawn or says there was nothing to draw."""

from __future__ import annotations

import html
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.audit import report
from raftka.audit.checks import CHECK_NAMES, SEVERITIES
from raftka.audit.counts import WIDTHS_MS, bucket_ms
from raftka.audit.event_tables import CONDITIONS
from raftka.audit.incidents import CONTROLLER, GROUP_REWOUND, GROUP_STALLED, OFFLINE, UNDER_MIN_ISR
from raftka.audit.job import make_summary
from raftka.audit.report import _span_history
from raftka.audit.synthetic import START_MS
from tests.unit.browser_support import render_errors
from tests.unit.report_support import (
    assert_every_chart_drawn_or_said_empty,
    assert_links_resolve,
    first_screen,
    incident_rows,
    rows_behind,
)

SPAN_MS = 10**9  # times fall within about eleven days of the history's start
ROWS_MAX = 6
MATHTEXT = "$\\undefined{x}$"  # a name matplotlib would parse as mathtext, and fail on
# what the job writes in the columns the charts branch on, and something it never writes
WORDS: dict[str, tuple[str, ...]] = {
    "cause": ("election", "offline", "create", "delete", "reassign", "isr_shrink", "unchanged", "other"),
    "isr_change": ("shrink", "expand", "change"),
    "condition": (*CONDITIONS, "other"),
    "state": ("FENCED", "UNFENCED", "UNREGISTERED"),
    "started_by": ("REGISTER", "REREGISTER", "SNAPSHOT", "FENCE", "UNFENCE", "UNREGISTER"),
    "check": tuple(sorted(CHECK_NAMES)),
    "severity": SEVERITIES,
    "topic": ("orders", "events", "t" * 60, MATHTEXT),
    "kind": (CONTROLLER, OFFLINE, UNDER_MIN_ISR, GROUP_REWOUND, GROUP_STALLED),
}
MARKUP = "<a href='#incident-1'>x</a> & \"quoted\""  # words from the history are text, never markup


def _values(field: pa.Field) -> st.SearchStrategy[Any]:
    kind = field.type
    if field.name in WORDS:
        value: st.SearchStrategy[Any] = st.sampled_from(WORDS[field.name]) | st.text(max_size=8)
    elif pa.types.is_boolean(kind):
        value = st.booleans()
    elif field.name in ("start_ms", "end_ms", "bucket_ms"):
        value = st.integers(START_MS - 1_000, START_MS + SPAN_MS)
    elif pa.types.is_integer(kind):
        value = st.integers(-2, 2) | st.integers(0, 2**31 - 1)
    elif pa.types.is_list(kind) and pa.types.is_string(kind.value_type):
        value = st.lists(st.none() | st.text(max_size=12) | st.just(MARKUP), max_size=4)
    elif pa.types.is_list(kind):
        value = st.lists(st.integers(-1, 200), max_size=4)
    else:
        value = st.text(max_size=12) | st.just(MARKUP)
    return st.none() | value if field.nullable else value


@st.composite
def _frame(draw: st.DrawFn, schema: pa.Schema) -> pd.DataFrame:
    """A table of ``schema``: rows of drawn values, or (one time in four) one column all null
    where it may be."""
    rows = draw(st.lists(st.fixed_dictionaries({f.name: _values(f) for f in schema}), max_size=ROWS_MAX))
    nulled = draw(st.sampled_from([None, *(f.name for f in schema if f.nullable)]))
    if nulled is not None:
        rows = [row | {nulled: None} for row in rows]
    return pa.Table.from_pylist(rows, schema=schema).to_pandas()


@st.composite
def _bucketed(draw: st.DrawFn, key: str, keys: st.SearchStrategy[str], value: str) -> pd.DataFrame:
    """Rows in time buckets of the width the job picks for the history's span (the write rate
    and committed offsets), possibly one bucket or none."""
    span = draw(st.sampled_from([0, 1, 999, *WIDTHS_MS]) | st.integers(0, SPAN_MS))
    width = bucket_ms(START_MS, START_MS + span)
    buckets = st.integers(0, span // width).map(lambda b: START_MS // width * width + b * width)
    rows = draw(st.lists(st.tuples(keys, buckets, st.integers(0, 10**9)), max_size=ROWS_MAX * 4))
    frame = pd.DataFrame(rows, columns=[key, "bucket_ms", value]).astype(
        {"bucket_ms": "int64", value: "int64"}
    )
    frame.attrs["width_ms"] = width
    return frame


TABLES = st.fixed_dictionaries({name: _frame(schema) for name, schema in report.SHOWN.items()})
WRITE_RATE = _bucketed(
    "type", st.sampled_from(["OffsetCommitRecord", "NoOpRecord", "PartitionChangeRecord"]), "count"
)
COMMITTED = _bucketed("group", st.sampled_from(["g1", "g2", "group-" + "x" * 40, MATHTEXT]), "committed")
BOUNDS = st.none() | st.tuples(st.integers(0, 10**7), st.integers(START_MS, START_MS + SPAN_MS))


def _page(out: Path, tables: dict[str, pd.DataFrame], rate: pd.DataFrame, committed: pd.DataFrame,
          bounds: tuple[int, int] | None, incidents_total: int | None = None) -> str:  # fmt: skip
    """The summary and the page, as the job makes them (``incidents_total``: as many as shown)."""
    history = (
        (None, None, None, None, 0) if bounds is None else (0, bounds[0], START_MS, bounds[1], bounds[0] + 1)
    )
    violations = (
        tables["violations"].astype(object).where(tables["violations"].notna(), None).to_dict("records")
    )
    merged = SimpleNamespace(voters=[1, 2, 3], gaps=[])
    figures = {"epochs": len(tables["controller_epochs"]), "broker_restarts": None}
    summary = make_summary([], merged, history, violations, figures, 0)
    json.dumps(summary, default=str)  # as summary.json is written
    total = len(tables["incidents"]) if incidents_total is None else incidents_total
    report.write(out / "report.html", summary, report.ReportData(tables, rate, committed, total, figures))
    return (out / "report.html").read_bytes().decode("utf-8")  # as written: read_text turns "\r" into "\n"


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(tables=TABLES, rate=WRITE_RATE, committed=COMMITTED, bounds=BOUNDS)
def test_any_tables_make_a_page_whose_every_chart_is_drawn_or_says_there_was_nothing(
    tmp_path_factory: pytest.TempPathFactory, tables: dict[str, pd.DataFrame], rate: pd.DataFrame,
    committed: pd.DataFrame, bounds: tuple[int, int] | None,
) -> None:  # fmt: skip
    page = _page(tmp_path_factory.mktemp("report"), tables, rate, committed, bounds)
    charts = assert_every_chart_drawn_or_said_empty(page)
    assert {chart for chart, png in charts.items() if png is not None} == _something_to_draw(
        tables, rate, committed
    )
    assert_incidents_listed_first_with_their_rows(page, tables["incidents"])


def assert_incidents_listed_first_with_their_rows(page: str, incidents: pd.DataFrame) -> None:
    """The page opens with the incidents, in the table's order, each linking to an anchor
    lower down that lists the rows behind it; none: it says so."""
    assert_links_resolve(page)
    listed = incident_rows(page)
    if incidents.empty:
        assert report.NO_INCIDENTS in first_screen(page) and listed == []
        return
    assert report.NO_INCIDENTS not in page
    assert [cells[2] for cells, _ in listed] == [html.escape(report._cell(w)) for w in incidents["what"]]
    for (_, anchor), behind in zip(listed, incidents["rows"], strict=True):
        said = [] if behind is None else [html.escape(line) for line in behind if line is not None]
        assert rows_behind(page, anchor) == said
        assert page.index(f"id='{anchor}'") > page.index("<h2>Checks</h2>")


def _something_to_draw(
    tables: dict[str, pd.DataFrame], rate: pd.DataFrame, committed: pd.DataFrame
) -> set[str]:
    """The charts whose tables hold a row they can place: the page may say "nothing" only
    for the others."""
    spans, brokers = tables["leadership"], tables["broker_spans"]
    levels, topics = tables["partition_levels"], tables["churn_by_topic"]
    leadership = tables["leadership_by_broker"]
    counted = ["elections_won", "leaderships_lost", "isr_removals"]
    churn = topics["topic"].notna() & (topics[["elections", "isr_shrinks", "isr_expands"]].sum(axis=1) > 0)
    found = {
        "leadership": (spans["leader"].notna() & spans["start_ms"].notna()).any(),
        "fenced": (brokers["broker"].notna() & brokers["start_ms"].notna()).any(),
        "partition_states": (
            levels["condition"].isin(report.TIME_CONDITIONS) & levels["bucket_ms"].notna()
            & levels["peak"].notna() & levels["last"].notna()
        ).any(),
        "churn": churn.any() or (leadership["broker"].notna() & (leadership[counted].sum(axis=1) > 0)).any(),
        "write_rate": not rate.empty,
        "committed": not committed.empty,
    }  # fmt: skip
    return {chart for chart, yes in found.items() if yes}


def _tables(**rows: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    return {
        name: pa.Table.from_pylist(rows.get(name, []), schema=schema).to_pandas()
        for name, schema in report.SHOWN.items()
    }


def _new_users_history() -> dict[str, pd.DataFrame]:
    """Three topics created, a config altered, an offset committed: no partition ever
    changed its leader or ISR (the history that crashed the report's churn chart)."""
    return _tables(
        controller_epochs=[{"epoch": 1, "leader": 1, "start_ms": START_MS, "tenure_ms": 60_000, "committed": True}],
        leadership=[{"leader": 1, "start_ms": START_MS, "duration_ms": 60_000}],
        broker_spans=[
            {"broker": b, "state": s, "start_ms": START_MS + i * 1_000, "duration_ms": 60_000 - i * 1_000,
             "restart": False}
            for b in (101, 102, 103) for i, s in enumerate(("FENCED", "UNFENCED"))
        ],
        leadership_by_broker=[
            {"broker": b, "partition_ms_led": 1_000, "elections_won": 0, "unclean_elections_won": 0,
             "leaderships_lost": 0, "isr_removals": 0}
            for b in (101, 102, 103)
        ],
    )  # fmt: skip


def _rate(rows: list[tuple[str, int, int]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["type", "bucket_ms", "count"])
    frame.attrs["width_ms"] = 1_000
    return frame


def test_a_history_where_no_partition_changed_says_so_instead_of_failing(tmp_path: Path) -> None:
    rate = _rate([("TopicRecord", START_MS, 3), ("OffsetCommitRecord", START_MS + 1_000, 1)])
    committed = pd.DataFrame([("g1", START_MS + 1_000, 5)], columns=["group", "bucket_ms", "committed"])
    page = _page(tmp_path, _new_users_history(), rate, committed, (40, START_MS + 60_000))
    charts = assert_every_chart_drawn_or_said_empty(page)
    assert [chart for chart, png in charts.items() if png is None] == ["partition_states", "churn"]
    assert (
        "Nothing to draw: no leader election or ISR change, election won, leadership lost or ISR removal"
        in page
    )
    assert render_errors(tmp_path / "report.html", tmp_path) == []


def test_an_empty_history_renders_every_chart_as_nothing_to_draw(tmp_path: Path) -> None:
    page = _page(
        tmp_path, _tables(), _rate([]), pd.DataFrame(columns=["group", "bucket_ms", "committed"]), None
    )
    assert assert_every_chart_drawn_or_said_empty(page) == dict.fromkeys(report.CHART_IDS)
    assert f"<p class='nothing' data-section='incidents'>{report.NO_INCIDENTS}</p>" in first_screen(page)
    assert render_errors(tmp_path / "report.html", tmp_path) == []


def test_incidents_named_like_markup_are_listed_first_and_link_to_their_rows_in_chromium(
    tmp_path: Path,
) -> None:
    incidents = [
        {"kind": OFFLINE, "start_ms": START_MS + 1_500, "duration_ms": 400, "open": False, "what": MARKUP,
         "why": "broker 3 fenced", "rows": ["partition_transitions: offset=7", MARKUP]},
        {"kind": CONTROLLER, "start_ms": START_MS + 3_000, "duration_ms": 125_000, "open": True,
         "what": "node 2 led epoch 3", "rows": []},
    ]  # fmt: skip
    page = _page(tmp_path, _tables(incidents=incidents), _rate([]),
                 pd.DataFrame(columns=["group", "bucket_ms", "committed"]), (10, START_MS + 200_000))  # fmt: skip
    listed = incident_rows(page)
    assert [cells[1:4] for cells, _ in listed] == [
        ["+1.500 s", html.escape(MARKUP), "400 ms"],
        ["+3.000 s", "node 2 led epoch 3", "2 min 5 s, still at the history&#x27;s end"],
    ]
    assert rows_behind(page, listed[0][1]) == ["partition_transitions: offset=7", html.escape(MARKUP)]
    assert "<li>none</li>" in page.split(f"<div id='{listed[1][1]}'>")[1].split("</div>")[0]
    assert_incidents_listed_first_with_their_rows(page, _tables(incidents=incidents)["incidents"])
    assert render_errors(tmp_path / "report.html", tmp_path) == []


def test_an_incident_whose_text_holds_a_carriage_return_reads_back_as_written(tmp_path: Path) -> None:
    """What the property once tripped on: a group id (any string) with "\r" in an incident's
    text and rows; the page keeps it, and the page must be read back byte for byte."""
    text = "group g\r1 rewound"
    incidents = [
        {"kind": CONTROLLER, "start_ms": START_MS, "duration_ms": 1, "open": False, "what": text,
         "rows": [text]},
    ]  # fmt: skip
    tables = _tables(incidents=incidents)
    page = _page(tmp_path, tables, _rate([]), pd.DataFrame(columns=["group", "bucket_ms", "committed"]), None)
    assert_incidents_listed_first_with_their_rows(page, tables["incidents"])


def test_the_render_check_sees_console_errors_exceptions_and_broken_images(tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text(
        "<!doctype html><html><head><title>t</title></head><body><img alt='chart' src='data:image/png;base64,AAAA'>"
        "<a href='#here'>fine</a><p id='here'></p><a href='#incident-9'>rows</a>"
        "<script>console.error('drawn wrong'); notDefined();</script></body></html>"
    )
    errors = render_errors(page, tmp_path)
    assert "console.error: drawn wrong" in errors
    assert any(e.startswith("uncaught: ") and "notDefined" in e for e in errors)
    assert "image not drawn: chart" in errors
    assert "link to nothing: #incident-9" in errors and not any("#here" in e for e in errors)


def test_a_chart_over_time_spans_the_whole_history_and_never_cuts_what_it_drew() -> None:
    """Brokers fenced for a second at their registration, in a history of forty seconds,
    are drawn as that second of the forty, not as fenced from edge to edge."""
    figure, ax = plt.subplots()
    ax.broken_barh([(1.4, 0.5)], (0, 1))
    ax.set_xlim(1.4, 1.9)
    _span_history(ax, 40.0)
    assert ax.get_xlim() == (0.0, 40.0)
    ax.set_xlim(-3.0, 50.0)  # drawn wider than the history: kept
    _span_history(ax, 40.0)
    assert ax.get_xlim() == (-3.0, 50.0)
    plt.close(figure)


def test_a_group_named_like_mathtext_is_drawn_as_its_name(tmp_path: Path) -> None:
    committed = pd.DataFrame([(MATHTEXT, START_MS, 5)], columns=["group", "bucket_ms", "committed"])
    page = _page(tmp_path, _tables(), _rate([]), committed, (1, START_MS + 1_000))
    assert assert_every_chart_drawn_or_said_empty(page)["committed"] is not None


def test_a_history_with_more_incidents_than_shown_says_how_many_and_where_they_all_are(
    tmp_path: Path,
) -> None:
    incidents = [
        {"kind": OFFLINE, "start_ms": START_MS + i, "duration_ms": 10, "open": False, "what": f"t-{i} offline",
         "rows": []}
        for i in range(3)
    ]  # fmt: skip
    tables = _tables(incidents=incidents)
    page = _page(tmp_path, tables, _rate([]), pd.DataFrame(columns=["group", "bucket_ms", "committed"]),
                 (10, START_MS + 200_000), incidents_total=123_456)  # fmt: skip
    assert_incidents_listed_first_with_their_rows(page, tables["incidents"])
    assert (
        "The 3 most important of 123,456 incidents (partitions offline first, then under min ISR, controllers, "
        "groups; the longest first), in time order: every one is in "
        f"<a href='{report.INCIDENTS_TABLE}'>{report.INCIDENTS_TABLE}</a> (Parquet)."
    ) in first_screen(page)
    assert render_errors(tmp_path / "report.html", tmp_path) == []

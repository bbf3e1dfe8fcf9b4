"""Tables line up and show missing values as '-'; key/value blocks align their values."""

from __future__ import annotations

from raftka.command import output


def test_table_aligns_columns() -> None:
    text = output.table(("ID", "ROLE"), [(1, "leader"), (10, None), (3, True)])
    assert text.splitlines() == ["ID  ROLE", "1   leader", "10  -", "3   yes"]


def test_fields_align_values() -> None:
    assert output.fields([("LeaderId", 1), ("HighWatermark", 42)]).splitlines() == [
        "LeaderId:      1",
        "HighWatermark: 42",
    ]


def test_to_json_is_parseable() -> None:
    import json

    assert json.loads(output.to_json({"a": [1, None]})) == {"a": [1, None]}

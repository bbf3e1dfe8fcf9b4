"""Reassignment plans in kafka-reassign-partitions' JSON shapes, and the plans raftka's
tools propose: pure functions, so the CLI only reads files and talks to the controller.

Shapes (Kafka's ``ReassignPartitionsCommand``):

- topics to move: ``{"version": 1, "topics": [{"topic": "foo"}, ...]}``
- a reassignment: ``{"version": 1, "partitions": [{"topic": "foo", "partition": 0,
  "replicas": [1, 2, 3], "log_dirs": ["any", "any", "any"]}, ...]}`` (``log_dirs`` optional;
  raftka has one log directory per broker, so only "any" is accepted)

A proposal spreads each topic over the given brokers with the placement new topics get
(``raftka.metadata.placement.place_replicas``), keeping its replication factor, as
Kafka's ``--generate`` does with its own placement.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from raftka.metadata.image import BrokerRegistration
from raftka.metadata.placement import place_replicas

VERSION = 1
ANY_LOG_DIR = "any"
Key = tuple[str, int]  # (topic, partition)
Assignment = dict[Key, tuple[int, ...]]


class PlanError(ValueError):
    """A plan file that does not have Kafka's shape; the message names the field."""


def parse_topics_to_move(text: str) -> list[str]:
    document = _document(text)
    topics = document.get("topics")
    if not isinstance(topics, list) or not topics:
        raise PlanError('topics: a non-empty list of {"topic": NAME} is required')
    names = []
    for i, entry in enumerate(topics):
        name = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise PlanError(f"topics[{i}].topic: a topic name is required")
        names.append(name)
    return names


def parse_reassignment(text: str, *, need_replicas: bool = True) -> Assignment:
    """(topic, partition) -> target replicas. ``need_replicas``: False for ``--cancel``,
    which reads only the partitions (their replicas may be left out)."""
    document = _document(text)
    partitions = document.get("partitions")
    if not isinstance(partitions, list) or not partitions:
        raise PlanError("partitions: a non-empty list is required")
    plan: Assignment = {}
    for i, entry in enumerate(partitions):
        where = f"partitions[{i}]"
        if not isinstance(entry, dict):
            raise PlanError(f"{where}: an object is required")
        topic, partition = entry.get("topic"), entry.get("partition")
        if not isinstance(topic, str) or not topic:
            raise PlanError(f"{where}.topic: a topic name is required")
        if not _is_int(partition) or partition < 0:
            raise PlanError(f"{where}.partition: a partition number (0 or more) is required")
        replicas = entry.get("replicas", [] if not need_replicas else None)
        if not isinstance(replicas, list) or not all(_is_int(r) for r in replicas):
            raise PlanError(f"{where}.replicas: a list of broker ids is required")
        if need_replicas and not replicas:
            raise PlanError(f"{where}.replicas: at least one broker id is required")
        log_dirs = entry.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(log_dirs, list) or any(d != ANY_LOG_DIR for d in log_dirs):
            raise PlanError(f'{where}.log_dirs: only "{ANY_LOG_DIR}" (raftka brokers have one log directory)')
        if (topic, partition) in plan:
            raise PlanError(f"{where}: partition {topic}-{partition} appears more than once")
        plan[(topic, partition)] = tuple(replicas)
    return plan


def to_json(assignment: Mapping[Key, Sequence[int]]) -> str:
    """Kafka's reassignment shape, partitions in order."""
    return json.dumps(
        {
            "version": VERSION,
            "partitions": [
                {
                    "topic": topic,
                    "partition": partition,
                    "replicas": list(replicas),
                    "log_dirs": [ANY_LOG_DIR] * len(replicas),
                }
                for (topic, partition), replicas in sorted(assignment.items())
            ],
        }
    )


def propose(current: Mapping[Key, Sequence[int]], brokers: Mapping[int, str]) -> Assignment:
    """Every topic of ``current`` spread over ``brokers`` (id -> rack), its replication
    factor kept. Raises ``placement.PlacementError`` when it exceeds the brokers."""
    registrations = [BrokerRegistration(b, "", 0, (), rack, False) for b, rack in sorted(brokers.items())]
    by_topic: dict[str, dict[int, Sequence[int]]] = {}
    for (topic, partition), replicas in current.items():
        by_topic.setdefault(topic, {})[partition] = replicas
    proposed: Assignment = {}
    for topic, partitions in sorted(by_topic.items()):
        rf = len(partitions[min(partitions)])
        placed = place_replicas(registrations, len(partitions), rf, seed=zlib.crc32(topic.encode()))
        for partition, replicas in zip(sorted(partitions), placed, strict=True):
            proposed[(topic, partition)] = replicas
    return proposed


def _document(text: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(f"not JSON: {e}") from None
    if not isinstance(document, dict):
        raise PlanError("a JSON object is required")
    if document.get("version", VERSION) != VERSION:
        raise PlanError(f"version: only {VERSION} is known, got {document.get('version')!r}")
    return document


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

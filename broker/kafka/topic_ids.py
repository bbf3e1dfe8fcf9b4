"""Topic ids as kafka-python decodes them: Kafka's zero UUID ("no id") arrives as None."""

from __future__ import annotations

import uuid

NO_TOPIC_ID = bytes(16)


def id_bytes(topic_id: uuid.UUID | None) -> bytes:
    """The id's 16 bytes; the zero id for None, which no topic has, so a lookup misses."""
    return NO_TOPIC_ID if topic_id is None else topic_id.bytes

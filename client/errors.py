"""The one exception ``Admin`` raises: a Kafka error name and the server's message.

Retriable conditions (no controller yet, a controller that just lost its lead, a node
that does not answer) are retried inside the client; an AdminError is what is left when
retrying cannot help, or when the bounded retries ran out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types.py imports this module
    from raftka.client.types import TopicPartition


class AdminError(Exception):
    """``code`` is the error's name (``TOPIC_ALREADY_EXISTS``, ``UNAVAILABLE``...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class KafkaError(Exception):
    """A produce or consume failure: ``code`` is Kafka's error name, with the server's message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class ProducerError(KafkaError):
    """A record that was not (or may not have been) written."""


class ConsumerError(KafkaError):
    """A fetch, offset lookup or commit that retrying cannot fix."""


class OffsetOutOfRangeError(ConsumerError):
    """No valid position and ``auto_offset_reset='none'``: the partitions are named."""


class LogTruncationError(OffsetOutOfRangeError):
    """Kafka's LogTruncationException: a leader change cut records this consumer fetched and
    ``auto_offset_reset='none'``. ``divergent_offsets`` gives each such partition's first
    offset known to diverge; the position stays until the application seeks."""

    def __init__(self, message: str, divergent_offsets: dict[TopicPartition, int]) -> None:
        super().__init__("LOG_TRUNCATION", message)
        self.divergent_offsets = divergent_offsets


class CommitFailedError(ConsumerError):
    """A commit refused because the member's generation or membership is stale (Kafka's
    CommitFailedException): its partitions may have moved; the consumer joins again."""

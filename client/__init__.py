"""raftka's clients, what users import: ``from raftka.client import Admin, Producer, Consumer``.

Each has an asyncio twin (``AsyncAdmin``, ``AsyncProducer``, ``AsyncConsumer``); the
synchronous ones run it on a private event loop, for scripts and the CLI.
"""

from raftka.client.admin import Admin, AsyncAdmin, RetryPolicy
from raftka.client.consumer import AsyncConsumer, Consumer, RebalanceListener
from raftka.client.errors import (
    AdminError,
    CommitFailedError,
    ConsumerError,
    KafkaError,
    OffsetOutOfRangeError,
    ProducerError,
)
from raftka.client.group_admin import GroupAdmin
from raftka.client.producer import AsyncProducer, Producer, RecordFuture
from raftka.client.types import (
    ConsumerRecord,
    NewTopic,
    OffsetCommit,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "Admin",
    "AdminError",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "CommitFailedError",
    "Consumer",
    "ConsumerError",
    "ConsumerRecord",
    "GroupAdmin",
    "KafkaError",
    "NewTopic",
    "OffsetCommit",
    "OffsetOutOfRangeError",
    "Producer",
    "ProducerError",
    "RebalanceListener",
    "RecordFuture",
    "RecordMetadata",
    "RetryPolicy",
    "TopicPartition",
]

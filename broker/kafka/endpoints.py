"""Where Kafka clients reach each broker: the ``KAFKA`` endpoint it registered."""

from __future__ import annotations

from dataclasses import dataclass

from raftka.metadata.image import MetadataImage

KAFKA_LISTENER = "KAFKA"  # the name a broker registers its Kafka listener under


@dataclass(frozen=True, slots=True)
class KafkaEndpoint:
    broker_id: int
    host: str
    port: int
    rack: str | None


def kafka_endpoints(image: MetadataImage) -> dict[int, KafkaEndpoint]:
    """The unfenced brokers that serve Kafka clients, by id (Kafka lists no fenced broker)."""
    found = {}
    for broker in image.brokers.values():
        endpoint = broker.endpoint(KAFKA_LISTENER)
        if endpoint is not None and not broker.fenced:
            found[broker.broker_id] = KafkaEndpoint(
                broker.broker_id, endpoint.host, endpoint.port, broker.rack or None
            )
    return found

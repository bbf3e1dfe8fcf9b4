"""Where Kafka clients reach each broker: the endpoint it registered for the listener the
client came in on (``KAFKA``, or ``KAFKA_EXTERNAL`` for ``kafka.external_listener``), as
Kafka answers each listener with its own advertised addresses: a client outside the
containers' network is told the addresses it can reach, and one inside, the others."""

from __future__ import annotations

from dataclasses import dataclass

from raftka.metadata.image import MetadataImage
from raftka.wire.server import current_listener

KAFKA_LISTENER = "KAFKA"  # the name a broker registers its Kafka listener under
KAFKA_EXTERNAL_LISTENER = "KAFKA_EXTERNAL"  # ... and its second one (kafka.external_listener)
# wire.server.Listener names -> the endpoint each one's clients are told
LISTENER_ENDPOINTS = {"kafka": KAFKA_LISTENER, "kafka-external": KAFKA_EXTERNAL_LISTENER}


@dataclass(frozen=True, slots=True)
class KafkaEndpoint:
    broker_id: int
    host: str
    port: int
    rack: str | None


def kafka_endpoints(image: MetadataImage) -> dict[int, KafkaEndpoint]:
    """The unfenced brokers that serve the current request's listener, by id (Kafka lists
    no fenced broker)."""
    name = LISTENER_ENDPOINTS.get(current_listener.get(), KAFKA_LISTENER)
    found = {}
    for broker in image.brokers.values():
        endpoint = broker.endpoint(name)
        if endpoint is not None and not broker.fenced:
            found[broker.broker_id] = KafkaEndpoint(
                broker.broker_id, endpoint.host, endpoint.port, broker.rack or None
            )
    return found

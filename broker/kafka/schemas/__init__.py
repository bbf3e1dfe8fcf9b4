"""Kafka message schemas kafka-python does not ship, as Kafka 3.9 defines them (its
``clients/src/main/resources/common/message/*.json``), loaded the way kafka-python loads
its own: a class named after its JSON file."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

_HERE = __name__


class UnregisterBrokerRequest(ApiMessage, load_json=_HERE):
    pass


class UnregisterBrokerResponse(ApiMessage, load_json=_HERE):
    pass

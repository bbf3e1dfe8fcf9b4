"""Connections to the other brokers' data listeners, for what transactions ask of them:
a coordinator's markers to partition leaders, a leader's KIP-890 question to a
transaction's coordinator. One connection per broker address, opened on first use."""

from __future__ import annotations

import ssl
from collections.abc import Callable

from raftka.metadata.image import MetadataImage
from raftka.wire.client import BrokerClient, BrokerClients
from raftka.wire.frames import DATA_LISTENER


class PeerBrokers:
    def __init__(self, image: Callable[[], MetadataImage], tls: ssl.SSLContext | None) -> None:
        """``tls``: this broker's client context, so its certificate says it is a broker."""
        self._image = image
        self._clients = BrokerClients(lambda address: BrokerClient(address, tls=tls))

    def client(self, broker_id: int) -> BrokerClient | None:
        """The broker's data listener as the newest image names it; None if it names none."""
        broker = self._image().brokers.get(broker_id)
        endpoint = None if broker is None else broker.endpoint(DATA_LISTENER)
        return None if endpoint is None else self._clients.get(f"{endpoint.host}:{endpoint.port}")

    def close(self) -> None:
        self._clients.close()

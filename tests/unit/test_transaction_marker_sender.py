"""The coordinator's side of WriteTxnMarkers against a real broker's data listener: the
request ``MarkerWriter`` builds names no broker, and the sender stamps this broker's id
and epoch on it, which a leader requires (it writes markers only for a registered broker,
as it serves a follower's fetch). Without them every marker was refused and no
transaction ever completed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from raftka.broker.transactions.markers import DataListenerLeaders
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient
from tests.unit.broker_in_process import BROKER, broker_in_process
from tests.unit.test_transaction_markers import TOPIC, fetch, produce, txn_batch

E = controller_pb2.ErrorCode
READ_COMMITTED = 1


def test_the_coordinators_markers_name_its_broker_and_end_the_transaction(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 1}) as broker:
            client = BrokerClient(broker.address)
            leaders = DataListenerLeaders(lambda: broker.api.image, None, BROKER, lambda: 1)
            try:
                await produce(client, txn_batch(1, 0, b"a0", b"a1"))
                request = broker_pb2.WriteTxnMarkersRequest()  # as MarkerWriter builds it
                marker = request.markers.add(
                    producer_id=1, producer_epoch=0, committed=True, coordinator_epoch=0
                )
                marker.topics.add(name=TOPIC, partitions=[0])
                answer = await leaders(BROKER, request)
                assert answer.status.error == E.NONE, answer.status.message
                assert answer.markers[0].topics[0].partitions[0].error == E.NONE
                done = await fetch(client, 0, READ_COMMITTED)
                assert (done.last_stable_offset, done.high_watermark) == (3, 3), "two records and the marker"
            finally:
                client.close()
                leaders.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))

"""What a producer or consumer knows of the cluster: brokers, topics, partition leaders.

Learned from any broker's ``Metadata`` answer (each broker answers from its own copy of
the metadata log), starting from the bootstrap addresses and then from every broker it
has heard of. A refresh is asked for when a leader turns out to be wrong; refreshes are
at least ``refresh_backoff_s`` apart, so a storm of NOT_LEADER answers costs one call.
One connection per broker (the data protocol of ``wire``) is shared by everything the
client sends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from raftka.client.errors import KafkaError
from raftka.client.types import TopicPartition
from raftka.security.sasl import SaslCredentials
from raftka.security.tls import TlsFiles
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient, BrokerClients, WireError

E = controller_pb2.ErrorCode
LIST_EARLIEST = -2
LIST_LATEST = -1


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    leader: int  # -1: none
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: bytes
    partitions: dict[int, PartitionLeader]

    def available(self) -> list[int]:
        return [p for p, state in self.partitions.items() if state.leader >= 0]


def parse_bootstrap(servers: str | Sequence[str]) -> list[str]:
    addresses = [
        a.strip() for a in (servers.split(",") if isinstance(servers, str) else servers) if a.strip()
    ]
    if not addresses:
        raise ValueError("bootstrap_servers: expected HOST:PORT,...")
    return addresses


class ClusterMetadata:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        request_timeout_s: float = 10.0,
        refresh_backoff_s: float = 0.1,
        tls: TlsFiles | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        """``tls``: every broker connection is mutual TLS with these files; None: plaintext.
        ``sasl``: every broker connection logs in as this user (a data listener with SASL)."""
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self.request_timeout_s = request_timeout_s
        self._refresh_backoff_s = refresh_backoff_s
        client_ssl = tls.client_ssl if tls else None
        self._clients = BrokerClients(lambda address: BrokerClient(address, tls=client_ssl, sasl=sasl))
        self.brokers: dict[int, str] = {}
        self.topics: dict[str, TopicInfo] = {}
        self._refreshed_at = 0.0
        self._refreshing: asyncio.Future[None] | None = None
        self._next = 0

    # connections ------------------------------------------------------------------------

    def broker(self, broker_id: int) -> BrokerClient | None:
        address = self.brokers.get(broker_id)
        return None if address is None else self._clients.get(address)

    def broker_at(self, address: str) -> BrokerClient:
        return self._clients.get(address)

    def any_broker(self) -> BrokerClient:
        addresses = list(self.brokers.values()) or self._bootstrap
        self._next += 1
        return self._clients.get(addresses[self._next % len(addresses)])

    async def close(self) -> None:
        self._clients.close()

    # metadata ---------------------------------------------------------------------------

    def leader(self, tp: TopicPartition) -> PartitionLeader | None:
        topic = self.topics.get(tp.topic)
        return None if topic is None else topic.partitions.get(tp.partition)

    async def topic(self, name: str) -> TopicInfo:
        """The topic, refreshing once if it is not known; KafkaError if no broker knows it."""
        if name not in self.topics:
            await self.refresh(force=True)
        info = self.topics.get(name)
        if info is None:
            await self._check_authorized(name)
            raise KafkaError("UNKNOWN_TOPIC_OR_PARTITION", f"no topic {name!r}")
        return info

    async def _check_authorized(self, name: str) -> None:
        """A listing leaves out what this principal may not describe: asked by name, a
        broker says TOPIC_AUTHORIZATION_FAILED, raised here (not retried, as Kafka's
        clients raise it) rather than waiting for a topic that will never appear."""
        try:
            response = await self.any_broker().Metadata(
                broker_pb2.MetadataRequest(topics=[name]), timeout=self.request_timeout_s
            )
        except WireError:
            return  # the refresh's answer stands
        for topic in response.topics:
            if topic.error == E.TOPIC_AUTHORIZATION_FAILED:
                raise KafkaError(E.Name(topic.error), topic.message)

    async def refresh(self, force: bool = False) -> None:
        """Ask a broker for the whole picture; concurrent callers share one call."""
        if self._refreshing is not None:
            return await asyncio.shield(self._refreshing)
        if not force and time.monotonic() - self._refreshed_at < self._refresh_backoff_s:
            return None
        self._refreshing = asyncio.get_running_loop().create_future()
        try:
            await self._refresh()
            self._refreshing.set_result(None)
        except BaseException as e:
            self._refreshing.set_exception(e)
            self._refreshing.exception()  # retrieved: the raise below reports it
            raise
        finally:
            self._refreshing = None
            self._refreshed_at = time.monotonic()
        return None

    async def _refresh(self) -> None:
        candidates = list(dict.fromkeys([*self.brokers.values(), *self._bootstrap]))
        problems = []
        for i in range(len(candidates)):
            address = candidates[(self._next + i) % len(candidates)]
            try:
                response = await self._clients.get(address).Metadata(
                    broker_pb2.MetadataRequest(), timeout=self.request_timeout_s
                )
            except WireError as e:
                problems.append(f"{address}: {e.code}")
                continue
            self._adopt(response)
            return
        raise KafkaError("BROKER_NOT_AVAILABLE", "no broker answered: " + ", ".join(problems))

    def _adopt(self, response: broker_pb2.MetadataResponse) -> None:
        """Take a broker's answer, but never a partition's older leader epoch: a broker
        that lags the metadata log must not send the client back to a deposed leader
        (Kafka's KIP-320)."""
        self.brokers = {b.broker_id: f"{b.host}:{b.port}" for b in response.brokers if b.port}
        topics = {}
        for t in response.topics:
            if t.error != E.NONE:
                continue
            known = self.topics.get(t.name)
            same_topic = known is not None and known.topic_id == t.topic_id
            partitions = {}
            for p in t.partitions:
                answer = PartitionLeader(p.leader if not p.offline else -1, p.leader_epoch)
                before = known.partitions.get(p.partition) if same_topic else None
                partitions[p.partition] = (
                    before if before is not None and before.leader_epoch > answer.leader_epoch else answer
                )
            topics[t.name] = TopicInfo(t.name, t.topic_id, partitions)
        self.topics = topics

    # offsets ----------------------------------------------------------------------------

    async def list_offsets(
        self, tps: Sequence[TopicPartition], timestamp: int, isolation_level: int = 0
    ) -> dict[TopicPartition, tuple[int, int]]:
        """(offset, timestamp) per partition from its leader: -2 earliest, -1 latest (the
        high watermark; with ``isolation_level`` 1, read_committed, the last stable offset),
        else the first record at or after ``timestamp`` ms (offset -1: none). Leaders that
        moved are found again; KafkaError after a few attempts."""
        result: dict[TopicPartition, tuple[int, int]] = {}
        wanted = list(tps)
        for attempt in range(20):
            for tp in wanted:
                await self.topic(tp.topic)
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in wanted:
                state = self.leader(tp)
                if state is None:
                    raise KafkaError("UNKNOWN_TOPIC_OR_PARTITION", f"no partition {tp}")
                by_leader.setdefault(state.leader, []).append(tp)
            retry: list[TopicPartition] = []
            problem = ""
            for leader, group in by_leader.items():
                broker = self.broker(leader) if leader >= 0 else None
                if broker is None:
                    retry += group
                    problem = f"no leader for {group[0]}"
                    continue
                request = broker_pb2.ListOffsetsRequest(isolation_level=isolation_level)
                for tp in group:
                    request.topics.add(name=tp.topic).partitions.add(
                        partition=tp.partition, timestamp=timestamp
                    )
                try:
                    response = await broker.ListOffsets(request, timeout=self.request_timeout_s)
                except WireError as e:
                    retry += group
                    problem = f"broker {leader}: {e.code}"
                    continue
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(topic.name, p.partition)
                        if p.error == E.NONE:
                            result[tp] = (p.offset, p.timestamp)
                        elif p.error in RETRIABLE:
                            retry.append(tp)
                            problem = f"{tp}: {E.Name(p.error)}"
                        else:
                            raise KafkaError(E.Name(p.error), p.message)
            if not retry:
                return result
            wanted = retry
            await asyncio.sleep(min(1.0, 0.05 * 2**attempt))
            await self.refresh(force=True)
        raise KafkaError("LEADER_NOT_AVAILABLE", f"listing offsets: {problem}")


RETRIABLE = frozenset(
    {
        E.NOT_LEADER_OR_FOLLOWER,
        E.LEADER_NOT_AVAILABLE,
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.NOT_ENOUGH_REPLICAS,
        E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        E.REQUEST_TIMED_OUT,
        E.FENCED_LEADER_EPOCH,
        E.UNKNOWN_LEADER_EPOCH,
        E.KAFKA_STORAGE_ERROR,
        E.OFFSET_NOT_AVAILABLE,
    }
)

"""A seeded random workload for the controller over an in-process quorum with crashes.

Each step picks one operation (topics, partitions, configs, offsets, broker
registration, heartbeats, fencing by session expiry, controlled shutdown, ISR changes,
elections) or crashes the active controller, sometimes with a write in flight. After
every step the running nodes must converge on the active controller's committed image,
the controller's latest image must equal it (nothing pending is left over), the image
must satisfy the partition invariants, and every acknowledged topic and offset must be
there (an operation answered NOT_CONTROLLER is ambiguous: the model takes the image's
word for that key).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field, replace

from raftka.metadata.controller import QuorumController
from raftka.metadata.image import NO_LEADER, MetadataImage
from raftka.v1 import controller_pb2 as pb
from tests.metadata_sim.quorum import Quorum

E = pb.ErrorCode
BROKER_IDS = (101, 102, 103, 104)
TOPICS = ("a", "b", "c", "d", "e")
GROUPS = ("g1", "g2")
CONFIGS = (
    ("retention.ms", "1000"),
    ("min.insync.replicas", "2"),
    ("segment.bytes", "1"),
    ("cleanup.policy", "delete"),
)


@dataclass
class Model:
    """What acknowledged operations promise; ``None`` where an answer was ambiguous."""

    partitions: dict[str, int | None] = field(default_factory=dict)  # topic -> partition count
    offsets: dict[tuple[str, str, int], int | None] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)  # broker -> epoch it registered with

    def check(self, image: MetadataImage) -> None:
        for name, count in self.partitions.items():
            topic = image.topic(name)
            if count is None:
                continue
            assert topic is not None and len(topic.partitions) == count, (name, count, topic)
        for (group, name, partition), offset in self.offsets.items():
            topic = image.topic(name)
            if offset is None or topic is None:
                continue
            committed = image.offsets.get(group, {}).get((topic.topic_id, partition))
            assert committed is not None and committed.offset == offset, (group, name, partition, offset)


def check_invariants(image: MetadataImage) -> None:
    fenced = {b for b, reg in image.brokers.items() if reg.fenced}
    for topic in image.topics_by_id.values():
        assert sorted(topic.partitions) == list(range(len(topic.partitions))), topic.name
        for p, state in topic.partitions.items():
            where = f"{topic.name}-{p}: {state}"
            assert set(state.isr) <= set(state.replicas), where
            assert state.leader == NO_LEADER or state.leader in state.isr, where
            if set(state.isr) & fenced:  # only as the last member of an offline partition (Kafka's rule)
                assert state.leader == NO_LEADER and len(state.isr) == 1, f"fenced broker in ISR: {where}"
    for group, offsets in image.offsets.items():
        for topic_id, partition in offsets:
            assert partition in image.topics_by_id[topic_id].partitions, (group, topic_id, partition)


class Workload:
    def __init__(self, seed: int, steps: int) -> None:
        self.rng = random.Random(seed)
        self.steps = steps
        self.quorum = Quorum(size=3, seed=seed, snapshot_interval_records=10, session_timeout_ms=5_000)
        self.model = Model()
        self.crashed: int | None = None
        self.restarted: int | None = None
        self.stats: Counter[str] = Counter()

    async def run(self) -> None:
        await self.quorum.start()
        try:
            c = (await self.quorum.active()).controller
            for broker_id in BROKER_IDS:
                await self.register(c, broker_id)
            await self.heartbeat(c)
            for _ in range(self.steps):
                await self.step()
                await self.verify()
        finally:
            await self.quorum.close()

    async def step(self) -> None:
        leader = await self.quorum.active()
        c = leader.controller
        if self.crashed is not None:
            await self.quorum.start(self.crashed)
            self.restarted, self.crashed = self.crashed, None
        roll = self.rng.random()
        if roll < 0.08:
            await self.crash_with_write_in_flight(leader.node.core.node_id)
            return
        op = self.rng.choice(
            [
                self.create_topic,
                self.create_topic,
                self.delete_topic,
                self.add_partitions,
                self.alter_config,
                self.commit_offset,
                self.commit_offset,
                self.register,
                self.heartbeat,
                self.heartbeat,
                self.expire_session,
                self.controlled_shutdown,
                self.add_partitions,
                self.commit_offset,
                self.alter_partition,
                self.elect,
            ]
        )
        await op(c)
        self.stats[op.__name__] += 1

    async def verify(self) -> None:
        image = await self.quorum.converged()
        leader = await self.quorum.active()
        latest = leader.controller.latest_image
        # Raft's idle NoOps move the committed image's offset past the controller's own
        # last batch: the offsets may differ, the contents may not.
        assert latest is not None and latest.offset <= image.offset, (latest, image.offset)
        assert replace(latest, offset=image.offset) == image, (
            "the latest image holds nothing pending once quiet"
        )
        check_invariants(image)
        self.model.check(image)
        if self.restarted is not None:
            self.stats["restarted from a snapshot"] += self.quorum.members[
                self.restarted
            ].state_machine.loaded_snapshot
            self.restarted = None

    # crashes ---------------------------------------------------------------------------
    async def crash_with_write_in_flight(self, leader_id: int) -> None:
        c = self.quorum.members[leader_id].controller
        name = self.rng.choice(TOPICS)
        write = asyncio.ensure_future(c.create_topics(self.create_request(name)))
        await asyncio.sleep(0)  # proposed, not yet committed
        await self.quorum.crash(leader_id)
        self.crashed = leader_id
        response = await write
        self.stats["crashes"] += 1
        self.stats["in-flight write lost"] += response.status.error == E.NOT_CONTROLLER
        self.model.partitions[name] = None  # ambiguous either way: the write may have committed

    # topics ----------------------------------------------------------------------------
    def create_request(self, name: str) -> pb.CreateTopicsRequest:
        rng = random.Random(name)  # the same shape every time a name is created
        return pb.CreateTopicsRequest(
            topics=[
                pb.CreatableTopic(
                    name=name, num_partitions=rng.randint(1, 4), replication_factor=rng.randint(1, 3)
                )
            ]
        )

    async def create_topic(self, c: QuorumController) -> None:
        name = self.rng.choice(TOPICS)
        request = self.create_request(name)
        response = await c.create_topics(request)
        if response.status.error != E.NONE:
            self.model.partitions[name] = None
        elif response.topics[0].error == E.NONE:
            self.model.partitions[name] = request.topics[0].num_partitions
            self.forget_offsets(name)
            self.stats["topics created"] += 1

    async def delete_topic(self, c: QuorumController) -> None:
        name = self.rng.choice(TOPICS)
        response = await c.delete_topics(pb.DeleteTopicsRequest(names=[name]))
        if response.status.error != E.NONE:
            self.model.partitions[name] = None
        elif response.topics[0].error == E.NONE:
            self.model.partitions.pop(name, None)
            self.forget_offsets(name)

    def forget_offsets(self, name: str) -> None:
        for key in [k for k in self.model.offsets if k[1] == name]:
            del self.model.offsets[key]

    async def add_partitions(self, c: QuorumController) -> None:
        name = self.rng.choice(TOPICS)
        topic = c.latest_image.topic(name)
        count = (len(topic.partitions) if topic else 0) + self.rng.randint(0, 2)
        response = await c.create_partitions(
            pb.CreatePartitionsRequest(topics=[pb.PartitionsIncrease(name=name, count=count)])
        )
        if response.status.error != E.NONE:
            self.model.partitions[name] = None
        elif response.topics[0].error == E.NONE:
            self.model.partitions[name] = count

    async def alter_config(self, c: QuorumController) -> None:
        key, value = self.rng.choice(CONFIGS)
        op = pb.AlterConfigOp(
            name=key, value=value, op=self.rng.choice([pb.ALTER_CONFIG_SET, pb.ALTER_CONFIG_DELETE])
        )
        await c.alter_configs(
            pb.AlterConfigsRequest(topics=[pb.AlterTopicConfigs(topic=self.rng.choice(TOPICS), ops=[op])])
        )

    async def commit_offset(self, c: QuorumController) -> None:
        group, name, partition = self.rng.choice(GROUPS), self.rng.choice(TOPICS), self.rng.randint(0, 3)
        offset = self.rng.randint(0, 1000)
        request = pb.OffsetCommitRequest(group=group)
        request.topics.add(topic=name).partitions.add(partition=partition, offset=offset)
        response = await c.commit_offsets(request)
        key = (group, name, partition)
        if response.status.error != E.NONE:
            self.model.offsets[key] = None
        elif response.partitions[0].error == E.NONE:
            self.model.offsets[key] = offset

    # brokers ---------------------------------------------------------------------------
    async def register(self, c: QuorumController, broker_id: int | None = None) -> None:
        """A broker (re)starts: a new incarnation, fenced until its next heartbeat."""
        broker_id = broker_id or self.rng.choice(BROKER_IDS)
        response = await c.register_broker(
            pb.BrokerRegistrationRequest(broker_id=broker_id, incarnation_id=f"i{self.rng.random()}")
        )
        if response.status.error == E.NONE:
            self.model.epochs[broker_id] = response.broker_epoch

    async def heartbeat(self, c: QuorumController) -> None:
        """Every broker heartbeats, caught up: the fenced ones come back."""
        for broker_id, epoch in sorted(self.model.epochs.items()):
            await c.broker_heartbeat(
                pb.BrokerHeartbeatRequest(
                    broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=epoch
                )
            )

    async def expire_session(self, c: QuorumController) -> None:
        """Everyone but one broker heartbeats, then its session runs out."""
        if not self.model.epochs:
            return
        victim = self.rng.choice(sorted(self.model.epochs))
        self.quorum.clock.advance(3_000)
        for broker_id, epoch in self.model.epochs.items():
            if broker_id != victim:
                await c.broker_heartbeat(
                    pb.BrokerHeartbeatRequest(
                        broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=epoch
                    )
                )
        self.quorum.clock.advance(3_000)
        fenced = c.latest_image.brokers[victim].fenced
        await c.tick()
        image = c.latest_image
        self.stats["fenced by expiry"] += image is not None and not fenced and image.brokers[victim].fenced

    async def controlled_shutdown(self, c: QuorumController) -> None:
        if not self.model.epochs:
            return
        broker_id = self.rng.choice(sorted(self.model.epochs))
        await c.broker_heartbeat(
            pb.BrokerHeartbeatRequest(
                broker_id=broker_id, broker_epoch=self.model.epochs[broker_id], want_shut_down=True
            )
        )

    async def alter_partition(self, c: QuorumController) -> None:
        """A partition leader drops a follower from its ISR or takes all live replicas back."""
        image = c.latest_image
        candidates = [
            (topic.topic_id, p, state)
            for topic in image.topics_by_id.values()
            for p, state in topic.partitions.items()
            if state.leader in self.model.epochs
        ]
        if not candidates:
            return
        topic_id, partition, state = self.rng.choice(candidates)
        live = {b.broker_id for b in image.unfenced_brokers()}
        if self.rng.random() < 0.5 and len(state.isr) > 1:
            new_isr = [
                b for b in state.isr if b != self.rng.choice([b for b in state.isr if b != state.leader])
            ]
        else:
            new_isr = [b for b in state.replicas if b in live or b == state.leader]
        data = pb.AlterPartitionData(
            partition=partition,
            leader_epoch=state.leader_epoch,
            new_isr=new_isr,
            partition_epoch=state.partition_epoch,
            new_isr_broker_epochs=[image.brokers[b].epoch for b in new_isr],  # KIP-903
        )
        await c.alter_partition(
            pb.AlterPartitionRequest(
                broker_id=state.leader,
                broker_epoch=self.model.epochs[state.leader],
                topics=[pb.AlterPartitionTopic(topic_id=topic_id, partitions=[data])],
            )
        )

    async def elect(self, c: QuorumController) -> None:
        await c.elect_leaders(pb.ElectLeadersRequest())

"""Which partitions this broker serves, and as what: derived from each metadata image.

A broker is a replica of a partition when the image lists it in the partition's
replicas; it leads the partition when the image names it leader, and follows otherwise.
But it takes no role at all until the image holds this process's own registration (its
incarnation id), unfenced. Until then the image may still name the previous incarnation
leader at its old leader epoch, and a restarted broker acting on that (after a lost disk
or an unflushed tail) would lead records it no longer has and tell its followers to
truncate what was committed. The controller moves the old incarnation's leaderships (a
new leader epoch) when the new one registers, and unfences it once it has replayed the
log up to its registration, so any leadership in the first image this broker serves was
given to this incarnation. From then on it serves for the life of the process.
``BrokerPartitions.update`` turns each new image into the role changes since the last
one, which is the hook the data plane (partition logs, produce/fetch, replica fetchers)
plugs into: become leader at an epoch, follow a (new) leader at an epoch, stop serving
a partition that was deleted or moved away.

Images share unchanged topics with the image they came from, so a topic object seen
before is skipped without looking at its partitions: an update costs what changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from raftka.metadata.image import MetadataImage, PartitionState, TopicImage


class Role(Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class PartitionRole:
    topic: str
    topic_id: bytes
    partition: int
    role: Role
    leader: int  # -1: offline (this broker still follows, waiting for a leader)
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class StoppedPartition:
    topic: str
    topic_id: bytes
    partition: int
    deleted: bool  # True: the topic is gone; False: this broker is no longer a replica

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RoleChanges:
    """What changed between two images, for this broker. A partition whose leader epoch
    moved appears again even if its role did not: a follower must then fetch from the
    new leader and truncate by leader epoch, a leader must fence older epochs. A leader's
    partition also appears when only its partition epoch moved (an ISR change committed),
    which is the answer to its AlterPartition. ``started``: the first changes this
    incarnation serves, so every role it has is in them."""

    leading: tuple[PartitionRole, ...] = ()
    following: tuple[PartitionRole, ...] = ()
    stopped: tuple[StoppedPartition, ...] = ()
    started: bool = False

    def __bool__(self) -> bool:
        return bool(self.leading or self.following or self.stopped)


def _registered_and_unfenced(image: MetadataImage, broker_id: int, incarnation_id: str) -> bool:
    """The image holds this incarnation's registration, unfenced."""
    registration = image.brokers.get(broker_id)
    return (
        registration is not None and registration.incarnation_id == incarnation_id and not registration.fenced
    )


class BrokerPartitions:
    """The partitions one broker serves, kept up to date image by image."""

    def __init__(self, broker_id: int, incarnation_id: str) -> None:
        self.broker_id = broker_id
        self.incarnation_id = incarnation_id
        self.serving = False  # this incarnation has been seen registered and unfenced
        self._topics: Mapping[bytes, TopicImage] = MappingProxyType({})
        self._roles: dict[bytes, dict[int, PartitionRole]] = {}  # topic id -> partition -> role

    def get(self, topic_id: bytes, partition: int) -> PartitionRole | None:
        return self._roles.get(topic_id, {}).get(partition)

    def roles(self) -> Iterator[PartitionRole]:
        for partitions in self._roles.values():
            yield from partitions.values()

    def leaders(self) -> list[PartitionRole]:
        return [r for r in self.roles() if r.role is Role.LEADER]

    def followers(self) -> list[PartitionRole]:
        return [r for r in self.roles() if r.role is Role.FOLLOWER]

    def update(self, image: MetadataImage) -> RoleChanges:
        """Adopt ``image``; return how this broker's roles changed since the last one."""
        started = not self.serving
        if started:
            if not _registered_and_unfenced(image, self.broker_id, self.incarnation_id):
                return RoleChanges()
            self.serving = True
        elif image.topics_by_id is self._topics:  # e.g. an offset commit: no topic changed
            return RoleChanges()
        leading: list[PartitionRole] = []
        following: list[PartitionRole] = []
        stopped: list[StoppedPartition] = []
        for topic_id, topic in image.topics_by_id.items():
            if self._topics.get(topic_id) is topic:
                continue
            old = self._roles.get(topic_id, {})
            new: dict[int, PartitionRole] = {}
            for partition_id, state in topic.partitions.items():
                role = self._role(topic, partition_id, state)
                if role is None:
                    if partition_id in old:
                        stopped.append(StoppedPartition(topic.name, topic_id, partition_id, deleted=False))
                    continue
                new[partition_id] = role
                before = old.get(partition_id)
                if _changed(before, role):
                    (leading if role.role is Role.LEADER else following).append(role)
            if new:
                self._roles[topic_id] = new
            else:
                self._roles.pop(topic_id, None)
        for topic_id, topic in self._topics.items():
            if topic_id not in image.topics_by_id:
                for partition_id in self._roles.pop(topic_id, {}):
                    stopped.append(StoppedPartition(topic.name, topic_id, partition_id, deleted=True))
        self._topics = image.topics_by_id
        return RoleChanges(tuple(leading), tuple(following), tuple(stopped), started)

    def _role(self, topic: TopicImage, partition_id: int, state: PartitionState) -> PartitionRole | None:
        if self.broker_id not in state.replicas:
            return None
        return PartitionRole(
            topic=topic.name,
            topic_id=topic.topic_id,
            partition=partition_id,
            role=Role.LEADER if state.leader == self.broker_id else Role.FOLLOWER,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            replicas=state.replicas,
            isr=state.isr,
        )


def _changed(before: PartitionRole | None, now: PartitionRole) -> bool:
    if before is None or before.role is not now.role or before.leader_epoch != now.leader_epoch:
        return True
    return now.role is Role.LEADER and before.partition_epoch != now.partition_epoch

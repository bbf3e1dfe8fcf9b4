"""Leadership and ISR changes when brokers come and go: pure functions over an image.

A broker that is fenced (session expired, controlled shutdown, a new incarnation)
leaves every ISR; each partition it led elects the first other ISR member, in replica
order, that is unfenced, or goes offline (leader -1) when there is none. The last ISR
member stays in the ISR, as in Kafka (without ELR): it is the one replica known to hold
every committed record, so the partition waits for it, and when it returns it is
elected, cleanly, in a new leader epoch.

When a broker is unfenced, the partitions it replicates take it back into their ISR
only once it has caught up on their data, through AlterPartition from the partition
leader (Kafka's rule). The one thing its return changes at once is an offline
partition whose ISR names it: it is elected there, cleanly, in a new leader epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from raftka.metadata.image import LEADER_UNCHANGED, NO_LEADER, MetadataImage, PartitionState
from raftka.metadata.plan import MetadataRecord, live_broker_ids, partition_change

MayLead = Callable[[int, bytes, int], bool]  # (broker, topic id, partition) -> may it lead there


def anyone(broker_id: int, topic_id: bytes, partition: int) -> bool:
    return True


def elect(replicas: tuple[int, ...], isr: tuple[int, ...], usable: Callable[[int], bool]) -> int:
    """The first ISR member in replica order that may lead, else NO_LEADER."""
    return next((b for b in replicas if b in isr and usable(b)), NO_LEADER)


def partitions(image: MetadataImage) -> Iterator[tuple[bytes, int, PartitionState]]:
    for topic_id, topic in image.topics_by_id.items():
        for partition_id, state in topic.partitions.items():
            yield topic_id, partition_id, state


def _these(
    image: MetadataImage, wanted: Iterable[tuple[bytes, int]]
) -> Iterator[tuple[bytes, int, PartitionState]]:
    for topic_id, partition_id in wanted:
        topic = image.topics_by_id.get(topic_id)
        state = None if topic is None else topic.partitions.get(partition_id)
        if state is not None:
            yield topic_id, partition_id, state


def remove_broker(
    image: MetadataImage,
    broker_id: int,
    limit: int | None = None,
    *,
    among: Iterable[tuple[bytes, int]] | None = None,
    may_lead: MayLead = anyone,
) -> list[MetadataRecord]:
    """``broker_id`` leaves every ISR but as its last member; the partitions it led elect
    from what remains, or go offline. With ``limit``, only the first that many changes:
    the rest are found again in the image the changes produce. ``among``: only these
    (topic id, partition), e.g. those a broker reports offline (``raftka.metadata.offline_replicas``);
    ``may_lead``: who may lead a partition besides being unfenced."""
    live = live_broker_ids(image) - {broker_id}
    records: list[MetadataRecord] = []
    for topic_id, partition_id, state in partitions(image) if among is None else _these(image, among):
        if len(records) == limit:
            break
        if broker_id not in state.isr and state.leader != broker_id:
            continue
        isr = tuple(b for b in state.isr if b != broker_id) or state.isr
        leader = LEADER_UNCHANGED
        if state.leader == broker_id:
            candidates = tuple(b for b in isr if may_lead(b, topic_id, partition_id))
            leader = elect(state.replicas, candidates, live.__contains__)
        if isr == state.isr and leader == LEADER_UNCHANGED:
            continue  # the last ISR member of a partition already offline
        records.append(
            partition_change(topic_id, partition_id, isr=isr if isr != state.isr else None, leader=leader)
        )
    return records


def restore_broker(
    image: MetadataImage,
    broker_id: int,
    *,
    among: Iterable[tuple[bytes, int]] | None = None,
    may_lead: MayLead = anyone,
) -> list[MetadataRecord]:
    """The return of ``broker_id``: offline partitions whose ISR names it elect it. (An
    ISR emptied by versions before the last member was kept takes it too.) ``among`` and
    ``may_lead`` as for ``remove_broker``."""
    records = []
    for topic_id, partition_id, state in partitions(image) if among is None else _these(image, among):
        if state.leader != NO_LEADER or broker_id not in state.replicas:
            continue
        if not may_lead(broker_id, topic_id, partition_id):
            continue
        if broker_id in state.isr or not state.isr:
            isr = state.isr or (broker_id,)
            records.append(
                partition_change(
                    topic_id, partition_id, isr=isr if isr != state.isr else None, leader=broker_id
                )
            )
    return records

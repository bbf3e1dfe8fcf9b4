"""Leadership, ISR and ELR changes when brokers come and go: pure functions over an image.

A broker that is fenced (session expired, controlled shutdown, a new incarnation) leaves
every ISR, the last member's included; while an ISR is below min.insync.replicas the
members it loses become eligible leader replicas (KIP-966, ``raftka.metadata.eligible_leaders``),
so the one replica known to hold every committed record is remembered, not kept in the
ISR. Each partition the broker led elects from what remains of its ISR, or, when that is
empty, from its ELR; with neither it goes offline (leader -1) and waits.

A broker whose data is gone (registered with another log directory than before: a wiped
or new disk; or reporting a partition's folder wiped) also leaves every ELR concerned
(``unclean``) and is never elected from one. One that crashed with its directory intact
(SIGKILL, power cut) keeps its ELR places (``crashed``): where it was the last ISR member
it is elected when no replica that did not crash can be and every ELR member is back
(one away may return from a clean stop with what a power cut took from it), so a whole
cluster killed at once comes back.

When a broker is unfenced, the partitions it replicates take it back into their ISR only
once it has caught up on their data, through AlterPartition from the partition leader
(Kafka's rule). The one thing its return changes at once is an offline partition that it
may lead: one whose ISR names it, or whose ISR is empty and whose ELR names it.

Both may be limited to some partitions (``among``: those a broker reports offline,
``raftka.metadata.offline_replicas``) and to the brokers that may lead each (``may_lead``:
not one reporting that partition offline).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator

from raftka.metadata import eligible_leaders
from raftka.metadata.image import NO_LEADER, MetadataImage, PartitionState
from raftka.metadata.plan import MetadataRecord, crashed_broker_ids, live_broker_ids

MayLead = Callable[[int, bytes, int], bool]  # (broker, topic id, partition) -> may it lead there


def anyone(broker_id: int, topic_id: bytes, partition: int) -> bool:
    return True


def staying(shutting_down: Collection[int], may_lead: MayLead = anyone) -> MayLead:
    """``may_lead``, and not a broker in controlled shutdown: as Kafka's
    ``isAcceptableLeader`` (active: unfenced and not shutting down). Brokers stopped
    together would otherwise elect one another in turn, each step of one's fencing
    handing its partitions to another that is leaving too. ``shutting_down`` is read at
    each call: the controller's own set, which changes as brokers leave."""
    return lambda broker_id, topic_id, partition: (
        broker_id not in shutting_down and may_lead(broker_id, topic_id, partition)
    )


def partitions(
    image: MetadataImage, among: Iterable[tuple[bytes, int]] | None = None
) -> Iterator[tuple[bytes, int, PartitionState, eligible_leaders.Policy]]:
    """Every partition (or those ``among``) with its topic's election policy."""
    if among is None:
        for topic_id, topic in image.topics_by_id.items():
            policy = eligible_leaders.topic_policy(image, topic.name)
            for partition_id, state in topic.partitions.items():
                yield topic_id, partition_id, state, policy
        return
    for topic_id, partition_id in among:
        topic = image.topics_by_id.get(topic_id)
        state = None if topic is None else topic.partitions.get(partition_id)
        if topic is not None and state is not None:
            yield topic_id, partition_id, state, eligible_leaders.topic_policy(image, topic.name)


def remove_broker(
    image: MetadataImage,
    broker_id: int,
    limit: int | None = None,
    *,
    unclean: bool = False,
    among: Iterable[tuple[bytes, int]] | None = None,
    may_lead: MayLead = anyone,
) -> list[MetadataRecord]:
    """``broker_id`` leaves every ISR (and, ``unclean``, every ELR); the partitions it led
    elect from what remains, or go offline. With ``limit``, only the first that many
    changes: the rest are found again in the image the changes produce."""
    live, crashed = live_broker_ids(image) - {broker_id}, crashed_broker_ids(image)
    gone = (broker_id,) if unclean else ()
    records: list[MetadataRecord] = []
    for topic_id, partition_id, state, policy in partitions(image, among):
        if len(records) == limit:
            break
        named = broker_id in state.isr or state.leader == broker_id or (unclean and broker_id in state.elr)
        if not named:
            continue
        record = eligible_leaders.change(
            topic_id,
            partition_id,
            state,
            isr=tuple(b for b in state.isr if b != broker_id),
            policy=policy,
            acceptable=lambda b, t=topic_id, p=partition_id: b in live and may_lead(b, t, p),
            unclean=gone,
            crashed=crashed,
        )
        if record is not None:
            records.append(record)
    return records


def restore_broker(
    image: MetadataImage,
    broker_id: int,
    *,
    among: Iterable[tuple[bytes, int]] | None = None,
    may_lead: MayLead = anyone,
) -> list[MetadataRecord]:
    """The return of ``broker_id``: offline partitions it may lead elect it."""
    live, crashed = live_broker_ids(image) | {broker_id}, crashed_broker_ids(image)
    records = []
    for topic_id, partition_id, state, policy in partitions(image, among):
        if state.leader != NO_LEADER or broker_id not in state.replicas:
            continue
        record = eligible_leaders.change(
            topic_id,
            partition_id,
            state,
            isr=state.isr,
            policy=policy,
            acceptable=lambda b, t=topic_id, p=partition_id: b in live and may_lead(b, t, p),
            crashed=crashed,
        )
        if record is not None and record.partition_change.leader >= 0:  # elected
            records.append(record)
    return records

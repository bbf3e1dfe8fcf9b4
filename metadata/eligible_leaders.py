"""One partition's next ISR, eligible leader replicas and leader (Kafka's
``PartitionChangeBuilder`` with KIP-966's eligible leader replicas always on).

Why ELR. With acks=all, a record is acknowledged once the ISR holds it and the ISR has at
least min.insync.replicas members, and the leader's high watermark moves only while the
ISR is that large ("strict min ISR", ``raftka.broker.replica.partition``). So a replica
that leaves the ISR while the ISR is *below* min.insync.replicas holds every committed
record: nothing was committed after it left. It goes to the ELR, and when the ISR is
empty it may be elected, cleanly. A replica that leaves while the ISR is still large
enough may miss what is committed after, so it goes nowhere.

The rules, as Kafka's:

- While the target ISR has min.insync.replicas members or more, the ELR and the last
  known ELR are empty.
- Below it, the ELR is (the current ISR and ELR) minus the target ISR minus replicas whose
  data is gone (``unclean``: registered with another log directory than before, a wiped
  or new disk, or reporting the partition's folder wiped), the last to leave the ISR
  first: the last ISR member, the last leader as a rule, holds the longest log. The last
  known ELR keeps the ones that were eligible and no longer are, for an operator.
- The ISR may be empty: the ELR then holds the partition's data.
- Election, when the current leader may no longer lead: the first replica, in replica
  order, that is in the target ISR and acceptable (unfenced). When the target ISR is
  empty, from the ELR, which becomes the ISR alone: the first acceptable member that did
  not crash; else, once *every* member is back (acceptable), the first member (the last
  ISR member) even if it crashed. ``crashed``: registered after a crash with its log
  directory intact (KIP-858's directory id tells it from a wiped one), so holding what it
  held up to its last flush: a power cut may have taken acknowledged records from it.
  While another member is away it is not elected, since that one may come back having
  stopped cleanly with every acknowledged record (KAFKA-15586 takes such a broker out
  of the ELR altogether; raftka keeps it, so that a whole cluster killed at once comes
  back without an operator once every member is back). With every member back and
  every one crashed, none is known to hold more: the last ISR member, whose log was the
  longest, leads. Else no leader: the partition waits for an eligible replica. A replica
  whose data is gone is never elected cleanly.
- Unclean election, only with the topic's ``unclean.leader.election.enable`` (Kafka's,
  false by default): with no eligible replica, the first acceptable last known ELR member,
  else the first acceptable replica, leads alone; the ELR and last known ELR are emptied.
  Acknowledged records may be lost: the operator chooses availability. A partition with a
  single replica does this always: there is no other copy to wait for, and an operator's
  unclean election could only choose the same replica.
- A new min.insync.replicas or unclean.leader.election.enable applies to the topic's
  partitions at once (``after_config_change``): an ISR that meets the minimum empties the
  ELR, an offline partition may now elect.

One exception kept from before ELR was recorded: a partition whose ISR, ELR and last known
ELR are all empty (an ISR emptied by an older version) elects the first acceptable replica.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import NamedTuple

from raftka.metadata.image import (
    LEADER_UNCHANGED,
    NO_LEADER,
    TOPIC,
    MetadataImage,
    PartitionState,
    TopicImage,
)
from raftka.metadata.plan import MetadataRecord, crashed_broker_ids, live_broker_ids, partition_change
from raftka.metadata.topic_configs import MIN_INSYNC_REPLICAS, TOPIC_CONFIGS, UNCLEAN_LEADER_ELECTION_ENABLE


class Policy(NamedTuple):
    """What a topic's configs say about its elections."""

    min_isr: int
    unclean_election: bool


def policy(configs: Mapping[str, str]) -> Policy:
    """The election policy of a topic whose explicit configs are ``configs`` (else the defaults)."""
    value = lambda key: configs.get(key, TOPIC_CONFIGS[key].default)  # noqa: E731
    return Policy(int(value(MIN_INSYNC_REPLICAS)), value(UNCLEAN_LEADER_ELECTION_ENABLE) == "true")


def topic_policy(image: MetadataImage, topic: str) -> Policy:
    return policy(image.configs.get((TOPIC, topic), {}))


def after_config_change(
    image: MetadataImage,
    topic: TopicImage,
    new: Policy,
    may_lead: Callable[[int, bytes, int], bool],
) -> list[MetadataRecord]:
    """The changes a new policy brings to ``topic``'s partitions: a partition whose ISR now
    has min.insync.replicas members lets its high watermark move again, so its ELR may miss
    what commits next and is emptied, as KIP-966 does (raised, the minimum applies to later
    changes); an offline partition elects if the policy now lets it, a live broker that
    ``may_lead`` there (``raftka.metadata.elections.MayLead``). Partitions with a leader
    keep it."""
    live, crashed = live_broker_ids(image), crashed_broker_ids(image)
    records = []
    for partition_id, state in sorted(topic.partitions.items()):
        online = state.leader != NO_LEADER
        if online and not (state.elr or state.last_known_elr):
            continue
        record = change(
            topic.topic_id,
            partition_id,
            state,
            isr=state.isr,
            policy=new,
            acceptable=(
                (lambda b, leader=state.leader: b == leader)
                if online
                else (lambda b, p=partition_id: b in live and may_lead(b, topic.topic_id, p))
            ),
            crashed=crashed,
        )
        if record is not None:
            records.append(record)
    return records


def change(
    topic_id: bytes,
    partition_id: int,
    state: PartitionState,
    *,
    isr: tuple[int, ...],
    policy: Policy,
    acceptable: Callable[[int], bool],
    unclean: Collection[int] = (),
    crashed: Collection[int] = (),
) -> MetadataRecord | None:
    """The PartitionChangeRecord taking ``state`` to the target ``isr`` (None if nothing
    changes). ``acceptable``: may this broker lead (unfenced, not the one leaving);
    ``unclean``: brokers whose data is gone, out of the ISR and the ELR; ``crashed``:
    brokers elected from the ELR only as its first member, when no other is acceptable."""
    order = state.replicas
    isr = tuple(b for b in isr if b not in unclean)
    if len(isr) >= policy.min_isr:
        elr: tuple[int, ...] = ()
        last_known: tuple[int, ...] = ()
    else:
        candidates = set(state.elr) | set(state.isr)
        leaving = (b for b in order if b in state.isr)  # before those that left earlier
        elr = tuple(b for b in (*leaving, *state.elr) if b not in isr and b not in unclean)
        known = candidates | set(state.last_known_elr)
        last_known = tuple(b for b in order if b in known and b not in isr and b not in elr)
    leader = _elect(state, isr, elr, acceptable, crashed)
    if leader == NO_LEADER and (policy.unclean_election or len(order) == 1):
        leader = next((b for b in (*last_known, *order) if acceptable(b)), NO_LEADER)
        if leader != NO_LEADER:
            isr, elr, last_known = (leader,), (), ()
    if leader != NO_LEADER and leader not in isr:  # elected from the ELR (or the exception)
        isr, elr = (leader,), tuple(b for b in elr if b != leader)
    if (isr, leader, elr, last_known) == (state.isr, state.leader, state.elr, state.last_known_elr):
        return None
    return partition_change(
        topic_id,
        partition_id,
        isr=isr if isr != state.isr else None,
        leader=leader if leader != state.leader else LEADER_UNCHANGED,
        elr=elr if elr != state.elr else None,
        last_known_elr=last_known if last_known != state.last_known_elr else None,
    )


def _elect(
    state: PartitionState,
    isr: tuple[int, ...],
    elr: tuple[int, ...],
    acceptable: Callable[[int], bool],
    crashed: Collection[int],
) -> int:
    eligible = isr or elr
    if state.leader in eligible and acceptable(state.leader):
        return state.leader
    if isr:
        candidates = [b for b in state.replicas if b in isr and acceptable(b)]
    else:  # any that did not crash, the last to leave the ISR first; else, once every
        # member is back and none can bring more, the last one (see the module docstring)
        candidates = [b for b in elr if acceptable(b) and b not in crashed]
        if all(acceptable(b) for b in elr):
            candidates += elr[:1]
    chosen = candidates[0] if candidates else NO_LEADER
    if chosen == NO_LEADER and not (state.isr or state.elr or state.last_known_elr):
        chosen = next((b for b in state.replicas if acceptable(b)), NO_LEADER)  # the exception above
    return chosen

"""Builders for metadata records, and a hypothesis strategy for valid record sequences."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

from raftka.metadata.acls import Acl
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.image import BROKER, LEADER_UNCHANGED, NO_LEADER, TOPIC, MetadataImage
from raftka.metadata.snapshot import scram_record
from raftka.metadata.transactions import OPEN
from raftka.security import scram
from raftka.v1 import metadata_pb2 as pb

Record = pb.MetadataRecord


def topic_id(n: int) -> bytes:
    assert n > 0
    return n.to_bytes(16, "big")


def log_dir_id(broker_id: int) -> bytes:
    return (broker_id + 1).to_bytes(16, "big")


def register(
    broker_id: int,
    epoch: int,
    *,
    fenced: bool = True,
    rack: str = "",
    port: int = 9092,
    crashed: bool = False,
) -> Record:
    endpoint = pb.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=port)
    return Record(
        register_broker=pb.RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=f"inc-{broker_id}-{epoch}",
            broker_epoch=epoch,
            endpoints=[endpoint],
            rack=rack,
            fenced=fenced,
            log_dir_id=log_dir_id(broker_id),
            crashed=crashed,
        )
    )


def fence(broker_id: int, epoch: int) -> Record:
    return Record(fence_broker=pb.FenceBrokerRecord(id=broker_id, epoch=epoch))


def unfence(broker_id: int, epoch: int) -> Record:
    return Record(unfence_broker=pb.UnfenceBrokerRecord(id=broker_id, epoch=epoch))


def unregister(broker_id: int, epoch: int) -> Record:
    return Record(unregister_broker=pb.UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=epoch))


def topic(name: str, tid: bytes) -> Record:
    return Record(topic=pb.TopicRecord(name=name, topic_id=tid))


def partition(
    tid: bytes,
    partition_id: int,
    replicas: Sequence[int],
    *,
    isr: Sequence[int] | None = None,
    leader: int | None = None,
    leader_epoch: int = 0,
    partition_epoch: int = 0,
) -> Record:
    isr = replicas if isr is None else isr
    return Record(
        partition=pb.PartitionRecord(
            partition_id=partition_id,
            topic_id=tid,
            replicas=replicas,
            isr=isr,
            leader=(isr[0] if isr else NO_LEADER) if leader is None else leader,
            leader_epoch=leader_epoch,
            partition_epoch=partition_epoch,
        )
    )


def change(
    tid: bytes,
    partition_id: int,
    *,
    leader: int = LEADER_UNCHANGED,
    isr: Sequence[int] | None = None,
    replicas: Sequence[int] | None = None,
) -> Record:
    record = pb.PartitionChangeRecord(partition_id=partition_id, topic_id=tid, leader=leader)
    if isr is not None:
        record.isr.ids.extend(isr)
        record.isr.SetInParent()
    if replicas is not None:
        record.replicas.ids.extend(replicas)
    return Record(partition_change=record)


def remove(tid: bytes) -> Record:
    return Record(remove_topic=pb.RemoveTopicRecord(topic_id=tid))


def config(resource_name: str, key: str, value: str | None, *, resource_type: int = TOPIC) -> Record:
    record = pb.ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=key)  # type: ignore[arg-type]
    if value is not None:
        record.value = value
    return Record(config=record)


def feature(name: str, level: int) -> Record:
    return Record(feature_level=pb.FeatureLevelRecord(name=name, feature_level=level))


def producer_ids(next_id: int, broker_id: int = 1, broker_epoch: int = 0) -> Record:
    return Record(
        producer_ids=pb.ProducerIdsRecord(
            broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=next_id
        )
    )


def no_op() -> Record:
    return Record(no_op=pb.NoOpRecord())


def commit(group: str, tid: bytes, partition_id: int, offset: int, metadata: str = "", ts: int = 1) -> Record:
    return Record(
        offset_commit=pb.OffsetCommitRecord(
            group=group,
            topic_id=tid,
            partition=partition_id,
            offset=offset,
            metadata=metadata,
            commit_timestamp_ms=ts,
        )
    )


def remove_group_offsets(group: str) -> Record:
    return Record(remove_group_offsets=pb.RemoveGroupOffsetsRecord(group=group))


def transaction(
    transactional_id: str,
    producer_id: int,
    epoch: int,
    state: int = pb.TXN_EMPTY,
    partitions: Sequence[tuple[str, int]] = (),
    groups: Sequence[str] = (),
) -> Record:
    record = pb.TransactionRecord(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        last_producer_id=-1,
        last_producer_epoch=-1,
        state=state,
        timeout_ms=60_000,
        groups=groups,
        start_time_ms=-1,
    )
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    for topic, ids in sorted(by_topic.items()):
        record.topics.add(name=topic, partitions=ids)
    return Record(transaction=record)


def txn_offset_commit(
    transactional_id: str,
    producer_id: int,
    epoch: int,
    group: str,
    tid: bytes,
    partition_id: int,
    offset: int,
) -> Record:
    return Record(
        txn_offset_commit=pb.TxnOffsetCommitRecord(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            group=group,
            topic_id=tid,
            partition=partition_id,
            offset=offset,
            commit_timestamp_ms=1,
        )
    )


def group_rebalance(
    group: str,
    generation: int,
    members: Sequence[str] = ("m1",),
    *,
    assignment: Sequence[tuple[str, Sequence[int]]] = (),
) -> Record:
    """A completed rebalance; the first member leads and gets ``assignment``."""
    return Record(
        group_rebalance=pb.GroupRebalanceRecord(
            group=group,
            generation_id=generation,
            protocol_type="consumer",
            protocol_name="range",
            leader=members[0] if members else "",
            members=[
                pb.GroupMemberRecord(
                    member_id=member,
                    client_id="c",
                    client_host="/127.0.0.1",
                    assignment=[pb.GroupAssignedTopic(topic=t, partitions=ps) for t, ps in assignment]
                    if i == 0
                    else [],
                )
                for i, member in enumerate(members)
            ],
            coordinator=101,
            timestamp_ms=5,
        )
    )


def replay(image: MetadataImage, *records: Record, offset: int | None = None) -> MetadataImage:
    """``records`` as one delta; the next offset defaults to one past the image per record."""
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta.apply(image.offset + len(records) if offset is None else offset)


# a strategy for valid sequences -----------------------------------------------------------

BROKER_IDS = (1, 2, 3, 4)
TOPIC_NAMES = ("a", "b", "c")
CONFIG_KEYS = ("retention.ms", "segment.bytes")
GROUPS = ("g1", "g2")


_BOOLS = st.booleans()
_EPOCHS = st.integers(0, 9)


def _pick(draw: st.DrawFn, choices: Sequence):  # type: ignore[no-untyped-def]
    """``st.sampled_from`` without building a strategy per draw (integers ones are cached): much faster."""
    return choices[draw(st.integers(0, len(choices) - 1))]


def _replicas(draw: st.DrawFn, ids: Sequence[int]) -> list[int]:
    """1 to 3 distinct ``ids`` (there is one at least), in a drawn order."""
    pool = list(ids)
    count = draw(st.integers(1, min(3, len(pool))))
    return [pool.pop(draw(st.integers(0, len(pool) - 1))) for _ in range(count)]


def _subset(draw: st.DrawFn, items: Sequence[int]) -> list[int]:
    return [i for i in items if draw(_BOOLS)]


def _leader(draw: st.DrawFn, isr: Sequence[int]) -> int:
    return _pick(draw, [*isr, NO_LEADER])


@st.composite
def valid_record(draw: st.DrawFn, image: MetadataImage) -> Record:
    """One record that replays cleanly onto ``image``. Partitions take in registered brokers
    only, and keep the ids of brokers that unregister."""
    brokers = image.brokers
    topics = image.topics_by_id
    with_partitions = sorted(tid for tid, t in topics.items() if t.partitions)
    options = ["register", "topic", "config_broker", "feature", "producer_ids", "no_op"]
    options += ["fence", "unfence", "unregister"] if brokers else []
    options += ["remove", "config_topic"] if topics else []
    options += ["partition"] if topics and brokers else []
    options += ["change", "change", "commit", "commit"] if with_partitions else []
    options += ["remove_group_offsets"] if image.offsets or image.groups else []
    options += ["group_rebalance", "transaction"]
    options += ["remove_transaction"] if any(t.state not in OPEN for t in image.transactions.values()) else []
    kind = _pick(draw, options)
    if kind == "register":
        broker_id = _pick(draw, BROKER_IDS)
        previous = brokers.get(broker_id)
        epoch = (previous.epoch if previous else 0) + draw(st.integers(1, 5))
        return register(broker_id, epoch, fenced=draw(_BOOLS), rack=_pick(draw, ["", "r1"]))
    if kind in ("fence", "unfence", "unregister"):
        broker = brokers[_pick(draw, sorted(brokers))]
        return {"fence": fence, "unfence": unfence, "unregister": unregister}[kind](
            broker.broker_id, broker.epoch
        )
    if kind == "topic":
        free = [n for n in TOPIC_NAMES if n not in image.topic_ids_by_name]
        name = _pick(draw, free) if free else f"t{image.offset}"
        return topic(name, topic_id(image.offset + 1))  # the log position: never reused
    if kind == "partition":
        tid = _pick(draw, sorted(topics))
        partition_id = draw(st.integers(0, len(topics[tid].partitions)))
        replicas = _replicas(draw, sorted(brokers))
        isr = _subset(draw, replicas)
        return partition(
            tid,
            partition_id,
            replicas,
            isr=isr,
            leader=_leader(draw, isr),
            leader_epoch=draw(_EPOCHS),
            partition_epoch=draw(_EPOCHS),
        )
    if kind == "change":
        tid = _pick(draw, with_partitions)
        parts = topics[tid].partitions
        partition_id = _pick(draw, sorted(parts))
        current = parts[partition_id]
        replicas = _replicas(draw, sorted({*brokers, *current.replicas})) if draw(_BOOLS) else None
        allowed = replicas if replicas is not None else current.replicas
        isr = None
        if replicas is not None or draw(_BOOLS):
            isr = _subset(draw, [b for b in allowed if b in brokers or b in current.isr])
        resulting_isr = isr if isr is not None else current.isr
        keeps_leader = current.leader == NO_LEADER or current.leader in resulting_isr
        leaders = [b for b in resulting_isr if b in brokers or b == current.leader]
        leader = _pick(draw, [*leaders, NO_LEADER, *([LEADER_UNCHANGED] if keeps_leader else [])])
        return change(tid, partition_id, leader=leader, isr=isr, replicas=replicas)
    if kind == "remove":
        return remove(_pick(draw, sorted(topics)))
    if kind == "config_topic":
        name = topics[_pick(draw, sorted(topics))].name
        return config(name, _pick(draw, CONFIG_KEYS), _pick(draw, [None, "1", "2"]))
    if kind == "config_broker":
        resource = _pick(draw, ["", "1"])
        return config(resource, "log.retention.ms", _pick(draw, [None, "5"]), resource_type=BROKER)
    if kind == "feature":
        return feature(_pick(draw, ["metadata.version", "group.version"]), draw(st.integers(0, 3)))
    if kind == "producer_ids":
        return producer_ids(image.next_producer_id + draw(st.integers(1, 1000)))
    if kind == "no_op":
        return no_op()
    if kind == "remove_group_offsets":
        return remove_group_offsets(_pick(draw, sorted({*image.offsets, *image.groups})))
    if kind == "group_rebalance":
        group = _pick(draw, GROUPS)
        previous = image.groups.get(group)
        generation = (previous.generation_id if previous else 0) + draw(st.integers(1, 3))
        members = draw(st.lists(st.sampled_from(["m1", "m2", "m3"]), unique=True, max_size=3))
        return group_rebalance(group, generation, members, assignment=[("t", [0, 1])] if members else [])
    if kind == "transaction":
        return _next_transaction(draw, image)
    if kind == "remove_transaction":
        idle = sorted(t for t, txn in image.transactions.items() if txn.state not in OPEN)
        return Record(remove_transaction=pb.RemoveTransactionRecord(transactional_id=_pick(draw, idle)))
    tid = _pick(draw, with_partitions)
    partition_id = _pick(draw, sorted(topics[tid].partitions))
    return commit(_pick(draw, GROUPS), tid, partition_id, draw(st.integers(0, 10**6)), "m", ts=7)


def _next_transaction(draw: st.DrawFn, image: MetadataImage) -> Record:
    """A transition of one of two transactional ids that the state table allows."""
    transactional_id = _pick(draw, ["tx-a", "tx-b"])
    previous = image.transactions.get(transactional_id)
    if previous is None:
        return transaction(transactional_id, draw(st.integers(0, 9)), 0)
    epoch, names = previous.producer_epoch, sorted(image.topic_ids_by_name)
    if previous.state == pb.TXN_ONGOING:
        state = _pick(draw, [pb.TXN_PREPARE_COMMIT, pb.TXN_PREPARE_ABORT])
        partitions = [(t.name, p) for t in previous.topics for p in t.partitions]
        return transaction(
            transactional_id, previous.producer_id, epoch, state, partitions, list(previous.groups)
        )
    if previous.state in (pb.TXN_PREPARE_COMMIT, pb.TXN_PREPARE_ABORT):
        done = pb.TXN_COMPLETE_COMMIT if previous.state == pb.TXN_PREPARE_COMMIT else pb.TXN_COMPLETE_ABORT
        partitions = [(t.name, p) for t in previous.topics for p in t.partitions]
        return transaction(
            transactional_id, previous.producer_id, epoch, done, partitions, list(previous.groups)
        )
    if draw(_BOOLS):
        return transaction(transactional_id, previous.producer_id, epoch + 1)
    partitions = [(_pick(draw, names), 0)] if names else []
    return transaction(transactional_id, previous.producer_id, epoch, pb.TXN_ONGOING, partitions, ["g1"])


@st.composite
def valid_log(draw: st.DrawFn, max_records: int = 40) -> list[Record]:
    """A sequence of records each valid on the image the ones before it make."""
    image = MetadataImage()
    log: list[Record] = []
    for _ in range(draw(st.integers(0, max_records))):
        record = draw(valid_record(image))
        image = replay(image, record)
        log.append(record)
    return log


def acl(principal: str, operation: str, resource_type: str, name: str, *, pattern: str = "LITERAL") -> Record:
    """An ALLOW ACL as the controller writes it (its id the digest of its fields)."""
    entry = Acl(resource_type, name, pattern, principal, "*", operation, "ALLOW")
    return Record(access_control_entry=entry.record())


def client_quota(user: str | None, client_id: str | None, key: str, value: float | None) -> Record:
    """A quota record; "<default>" names a type's default entity, None leaves the type out."""
    from raftka.metadata import quotas

    def name(given: str | None) -> quotas.Name:
        return quotas.DEFAULT if given == quotas.DEFAULT_SHOWN else given

    return Record(client_quota=quotas.record(quotas.QuotaEntity(name(user), name(client_id)), key, value))


def remove_acl(acl_id: str) -> Record:
    return Record(remove_access_control_entry=pb.RemoveAccessControlEntryRecord(id=acl_id))


def scram_credential(
    name: str, mechanism: str = "SCRAM-SHA-512", password: str = "secret", iterations: int = 4096
) -> Record:
    """A user's SCRAM credential as the controller writes it (keys, never the password)."""
    salt = b"salt-" + name.encode()
    kept = scram.credential(
        mechanism, scram.salted_password(mechanism, password, salt, iterations), salt, iterations
    )
    return Record(user_scram_credential=scram_record(name, mechanism, kept))


def remove_scram_credential(name: str, mechanism: str = "SCRAM-SHA-512") -> Record:
    return Record(
        remove_user_scram_credential=pb.RemoveUserScramCredentialRecord(name=name, mechanism=mechanism)
    )

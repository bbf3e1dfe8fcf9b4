"""Broker requests: registration, heartbeats and fencing, ISR changes, elections, ids.

Pure functions of the controller's latest image (see ``raftka.metadata.plan``). The broker
lifecycle (DESIGN.md "Metadata"): a broker registers (its epoch is the offset of its
RegisterBrokerRecord) and starts fenced; a heartbeat once it has replayed the log up to
its registration unfences it; a missed session, ``want_fence`` or a controlled shutdown
fences it again, which takes it out of every ISR (``raftka.metadata.elections``). An
operator's UnregisterBroker (``unregister``) removes the registration altogether.
"""

from __future__ import annotations

import enum
from collections.abc import Collection

from raftka.metadata import elections, eligible_leaders, isr_members, offline_replicas, reassign_ops
from raftka.metadata.image import BrokerRegistration, MetadataImage, PartitionState
from raftka.metadata.offline_replicas import OfflineReplicas
from raftka.metadata.plan import (
    ErrorCode,
    MetadataRecord,
    Plan,
    crashed_broker_ids,
    duplicates,
    live_broker_ids,
    partition_change,
    refuse,
)
from raftka.metadata.records import LOG_DIR_ID_BYTES, topic_id_str
from raftka.metadata.validation import OFFLINE_REPLICAS_MAX, ValidationError
from raftka.v1 import controller_pb2, metadata_pb2

BROKERS_MAX = 10_000  # bound: registrations the controller keeps sessions for
NAME_CHARS_MAX = 255  # incarnation ids, listener names, hosts, racks
PRODUCER_ID_BLOCK = 1000


def register(
    image: MetadataImage,
    request: controller_pb2.BrokerRegistrationRequest,
    next_offset: int,
    *,
    has_live_session: bool,
    may_lead: elections.MayLead = elections.anyone,
) -> Plan:
    """``next_offset``: where the batch will start, so the epoch (the registration's own
    offset) is known now; the registration is the batch's last record.
    ``has_live_session``: the id's current registration still heartbeats. Another
    incarnation claiming it then is a second process with the same id (Kafka's
    DUPLICATE_BROKER_REGISTRATION), refused so the two cannot replace each other in turn;
    a retry of the same incarnation, or a restart once the old session lapsed, is not. (A
    restart before then, ``restarted``, has the controller fence the old one first.)"""
    response = controller_pb2.BrokerRegistrationResponse()
    problem = _registration_problem(image, request)
    if problem is not None:
        return refuse(response, ErrorCode.INVALID_REQUEST, problem)
    existing = image.brokers.get(request.broker_id)
    if (
        existing is not None
        and not existing.fenced
        and has_live_session
        and existing.incarnation_id != request.incarnation_id
    ):
        return refuse(
            response,
            ErrorCode.DUPLICATE_BROKER_REGISTRATION,
            f"broker_id: {request.broker_id} is registered by a live incarnation "
            f"({existing.incarnation_id}); another process may be using this id",
        )
    records = []
    restart = restart_kind(existing, request)
    if request.broker_id in image.brokers:  # a new incarnation replaces the old, which leaves its ISRs
        records += elections.remove_broker(
            image, request.broker_id, unclean=restart is Restart.REPLACED, may_lead=may_lead
        )
    response.broker_epoch = next_offset + len(records)
    registration = metadata_pb2.RegisterBrokerRecord(
        broker_id=request.broker_id,
        incarnation_id=request.incarnation_id,
        broker_epoch=response.broker_epoch,
        endpoints=request.listeners,
        rack=request.rack,
        fenced=True,
        log_dir_id=request.log_dir_id,
        crashed=restart is Restart.CRASHED,
    )
    records.append(MetadataRecord(register_broker=registration))
    return Plan(response, records)


class Restart(enum.Enum):
    """What a registration says of the logs of the incarnation before it."""

    CLEAN = "clean"  # not a restart, or a clean shutdown's marker names the registration it replaces
    CRASHED = "crashed"  # no such marker, same log directory: held up to its last flush
    REPLACED = "replaced"  # another log directory (wiped, a new disk), or one not known: held nothing


def restart_kind(
    existing: BrokerRegistration | None, request: controller_pb2.BrokerRegistrationRequest
) -> Restart:
    """KIP-966 tells a clean shutdown from the rest by its marker; KIP-858's directory id
    tells a crash (SIGKILL, power cut: the directory is there, intact up to its last
    flush) from a wiped or replaced directory, whose broker may not be elected for what
    it held. Without a directory id registered last time (an older version), only a
    clean shutdown proves anything, as before directory ids. A retry of the same
    incarnation is not a restart: it stays what it was."""
    if existing is None:
        return Restart.CLEAN
    if existing.incarnation_id == request.incarnation_id:
        return Restart.CRASHED if existing.crashed else Restart.CLEAN
    clean = request.HasField("previous_broker_epoch") and request.previous_broker_epoch == existing.epoch
    if not existing.log_dir_id:  # registered without a directory id: the marker alone tells
        return Restart.CLEAN if clean else Restart.REPLACED
    if request.log_dir_id != existing.log_dir_id:
        return Restart.REPLACED
    return Restart.CLEAN if clean else Restart.CRASHED


def restarted(
    image: MetadataImage, request: controller_pb2.BrokerRegistrationRequest, *, has_live_session: bool
) -> BrokerRegistration | None:
    """The live registration that ``request`` comes to replace, if it is the same broker
    restarted before its session ran out: a new incarnation with the same listeners (two
    live processes cannot listen on one address; other listeners are a duplicate id).
    None for anything else, an invalid request included."""
    existing = image.brokers.get(request.broker_id)
    if (
        existing is None
        or existing.fenced
        or not has_live_session
        or existing.incarnation_id == request.incarnation_id
        or _registration_problem(image, request) is not None
    ):
        return None
    listeners = {(e.name, e.host, e.port) for e in request.listeners}
    return existing if listeners == {(e.name, e.host, e.port) for e in existing.endpoints} else None


def _registration_problem(
    image: MetadataImage, request: controller_pb2.BrokerRegistrationRequest
) -> str | None:
    if request.broker_id < 0:
        return f"broker_id: must be 0 or more, got {request.broker_id}"
    if not 0 < len(request.incarnation_id) <= NAME_CHARS_MAX:
        return f"incarnation_id: 1 to {NAME_CHARS_MAX} characters"
    if len(request.rack) > NAME_CHARS_MAX:
        return f"rack: at most {NAME_CHARS_MAX} characters"
    if len(request.log_dir_id) not in (0, LOG_DIR_ID_BYTES):
        return f"log_dir_id: {LOG_DIR_ID_BYTES} bytes (or none), got {len(request.log_dir_id)}"
    for listener in request.listeners:
        if not 0 < len(listener.host) <= NAME_CHARS_MAX or len(listener.name) > NAME_CHARS_MAX:
            return f"listeners: host must be 1 to {NAME_CHARS_MAX} characters, got {listener.host!r}"
        if not 0 < listener.port < 65536:
            return f"listeners: port must be in 1-65535, got {listener.port}"
    if request.broker_id not in image.brokers and len(image.brokers) >= BROKERS_MAX:
        return f"broker_id: the cluster already has the maximum of {BROKERS_MAX} brokers"
    return None


def registered(image: MetadataImage, broker_id: int, broker_epoch: int) -> BrokerRegistration:
    """The broker's registration, if ``broker_epoch`` is its current one."""
    broker = image.brokers.get(broker_id)
    if broker is None:
        raise ValidationError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
    if broker.epoch != broker_epoch:
        raise ValidationError(
            ErrorCode.STALE_BROKER_EPOCH,
            f"broker {broker_id}: epoch {broker_epoch} is not the current registration's ({broker.epoch})",
        )
    return broker


def unregister(
    image: MetadataImage, broker_id: int, records_max: int, may_lead: elections.MayLead = elections.anyone
) -> Plan:
    """One step of Kafka's UnregisterBroker (``handleBrokerUnregistered``): the broker leaves
    at most ``records_max`` ISRs and ELRs, the partitions it led electing from what remains
    (or going offline); once it is in none, the UnregisterBrokerRecord. As Kafka, a live
    broker may be unregistered: it then holds no place a leader could be elected from, and
    if its process comes back it registers as a new broker, with no ISR or ELR place, and
    catches up as any new follower before it may lead."""
    response = controller_pb2.UnregisterBrokerResponse()
    broker = image.brokers.get(broker_id)
    if broker is None:
        return refuse(
            response, ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker_id: {broker_id} is not a registered broker"
        )
    changes = elections.remove_broker(image, broker_id, limit=records_max, unclean=True, may_lead=may_lead)
    if changes:
        return Plan(response, changes)
    record = metadata_pb2.UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker.epoch)
    return Plan(response, [MetadataRecord(unregister_broker=record)])


def fence(
    image: MetadataImage,
    broker: BrokerRegistration,
    records_max: int,
    may_lead: elections.MayLead = elections.anyone,
) -> list[MetadataRecord]:
    """One step of fencing (a missed session, want_fence, shutdown): the broker leaves at
    most ``records_max`` ISRs; once it is in none, the FenceBrokerRecord. A broker in
    100,000 ISRs takes many steps, each planned on the image the last one produced, so
    the controller's loop serves other requests between them instead of planning,
    replaying and encoding every change in one turn. ``may_lead``: who may succeed it
    (not a broker that reports the partition offline)."""
    changes = elections.remove_broker(image, broker.broker_id, limit=records_max, may_lead=may_lead)
    if changes:
        return changes
    return [
        MetadataRecord(fence_broker=metadata_pb2.FenceBrokerRecord(id=broker.broker_id, epoch=broker.epoch))
    ]


def heartbeat(
    image: MetadataImage,
    request: controller_pb2.BrokerHeartbeatRequest,
    shutting_down: Collection[int],
    records_max: int,
    offline: OfflineReplicas | None = None,
) -> Plan:
    """``shutting_down``: brokers in controlled shutdown, which are never unfenced again.
    A heartbeat that fences plans one step of it (``fence``): the answer says fenced only
    once the FenceBrokerRecord is written, and the controller plans the next step.
    ``offline``: the reports of offline partitions heard so far; an unfenced broker's
    heartbeat plans one step of bringing its partitions in line with its own
    (``raftka.metadata.offline_replicas``), and is elected for none of them on its unfencing.
    The heartbeat that unfences also takes the broker out of the ISR and ELR of the
    partitions it lists wiped (their folder was gone at its start: it holds none of their
    data, though its log directory is the one it registered); a full list does that
    without unfencing (``_lists_every_wiped``)."""
    response = controller_pb2.BrokerHeartbeatResponse()
    try:
        broker = registered(image, request.broker_id, request.broker_epoch)
    except ValidationError as e:
        return refuse(response, e.code, e.message)
    caught_up = request.current_metadata_offset >= broker.epoch
    response.is_caught_up = caught_up
    records: list[MetadataRecord] = []
    report = frozenset() if offline is None else offline_replicas.reported(image, request)
    may_lead = elections.staying(shutting_down, elections.anyone if offline is None else offline.may_lead)
    if request.want_shut_down or request.want_fence or broker.broker_id in shutting_down:
        if not broker.fenced:
            records = fence(image, broker, records_max, may_lead)
        response.is_fenced = broker.fenced or records[-1].HasField("fence_broker")
        response.should_shut_down = request.want_shut_down or broker.broker_id in shutting_down
    elif broker.fenced and caught_up and _lists_every_wiped(request):
        unfence = metadata_pb2.UnfenceBrokerRecord(id=broker.broker_id, epoch=broker.epoch)
        wiped = offline_replicas.hosted(image, broker.broker_id, request.wiped_replicas)
        lacking = report | wiped
        holds = elections.staying(
            shutting_down, lambda _, topic_id, partition: (topic_id, partition) not in lacking
        )
        forgotten = elections.remove_broker(
            image, broker.broker_id, unclean=True, among=sorted(wiped), may_lead=may_lead
        )
        restored = elections.restore_broker(image, broker.broker_id, may_lead=holds)
        records = [*forgotten, MetadataRecord(unfence_broker=unfence), *restored]
        response.is_fenced = False
    elif broker.fenced and caught_up:  # more wiped than one heartbeat lists: these first
        wiped = offline_replicas.hosted(image, broker.broker_id, request.wiped_replicas)
        records = elections.remove_broker(
            image, broker.broker_id, unclean=True, among=sorted(wiped), may_lead=may_lead
        )
        response.is_fenced = True
    else:
        response.is_fenced = broker.fenced
        if offline is not None and not broker.fenced:
            before = offline.last_heard(broker.broker_id)
            records = offline_replicas.reconcile(
                image, broker.broker_id, report, before, may_lead, records_max
            )
    return Plan(response, records)


def _lists_every_wiped(request: controller_pb2.BrokerHeartbeatRequest) -> bool:
    """A full list (``OFFLINE_REPLICAS_MAX``) may leave more out: the broker lists the
    rest once its image shows these handled, and is unfenced only then."""
    return sum(len(t.partitions) for t in request.wiped_replicas) < OFFLINE_REPLICAS_MAX


def alter_partition(
    image: MetadataImage, request: controller_pb2.AlterPartitionRequest, shutting_down: Collection[int] = ()
) -> Plan:
    """ISR changes from a partition leader: a compare-and-set on ``partition_epoch``, each
    member eligible (``isr_members``); the ELR follows the new ISR (``eligible_leaders``)."""
    response = controller_pb2.AlterPartitionResponse()
    try:
        registered(image, request.broker_id, request.broker_epoch)
    except ValidationError as e:
        return refuse(response, e.code, e.message)
    keys = [(t.topic_id, p.partition) for t in request.topics for p in t.partitions]
    repeated = duplicates(keys)
    records = []
    for topic in request.topics:
        for data in topic.partitions:
            result = response.partitions.add(topic_id=topic.topic_id, partition=data.partition)
            try:
                if (topic.topic_id, data.partition) in repeated:
                    raise ValidationError(ErrorCode.INVALID_REQUEST, "partition appears more than once")
                record, state = _isr_change(image, request.broker_id, topic.topic_id, data, shutting_down)
            except ValidationError as e:
                result.error, result.message = e.code, e.message
                continue
            after = state if record is None else reassign_ops.merged(state, record.partition_change)
            if record is not None:
                records.append(record)
            result.leader = after.leader
            result.leader_epoch = state.leader_epoch + (after.leader != state.leader)
            result.isr.extend(after.isr)
            result.partition_epoch = state.partition_epoch + (record is not None)
            if after.leader != request.broker_id:  # it completed a reassignment that moved the leader
                result.error = ErrorCode.NEW_LEADER_ELECTED
                result.message = f"the ISR change completed a reassignment: broker {after.leader} leads now"
    return Plan(response, records)


def _isr_change(
    image: MetadataImage,
    broker_id: int,
    topic_id: bytes,
    data: controller_pb2.AlterPartitionData,
    shutting_down: Collection[int],
) -> tuple[MetadataRecord | None, PartitionState]:
    topic = image.topics_by_id.get(topic_id)
    state = None if topic is None else topic.partitions.get(data.partition)
    if state is None:
        raise ValidationError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic_id_str(topic_id)}-{data.partition}"
        )
    if data.leader_epoch < state.leader_epoch:
        raise ValidationError(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"leader epoch {data.leader_epoch} is older than {state.leader_epoch}",
        )
    if state.leader != broker_id or data.leader_epoch != state.leader_epoch:
        raise ValidationError(
            ErrorCode.INVALID_REQUEST,
            f"broker {broker_id} at leader epoch {data.leader_epoch} is not the leader "
            f"(leader {state.leader}, epoch {state.leader_epoch})",
        )
    if data.partition_epoch != state.partition_epoch:
        raise ValidationError(
            ErrorCode.INVALID_UPDATE_VERSION,
            f"partition epoch {data.partition_epoch} is not the current {state.partition_epoch}",
        )
    if len(data.new_isr) > len(state.replicas):  # before the list is copied or printed
        raise ValidationError(
            ErrorCode.INVALID_REQUEST,
            f"new_isr: {len(data.new_isr)} entries, the partition has {len(state.replicas)} replicas",
        )
    new_isr = tuple(data.new_isr)
    if (
        len(set(new_isr)) != len(new_isr)
        or not set(new_isr) <= set(state.replicas)
        or broker_id not in new_isr
    ):
        raise ValidationError(
            ErrorCode.INVALID_REQUEST,
            f"new_isr {list(new_isr)} must be distinct replicas of {list(state.replicas)} including the leader",
        )
    isr_members.check(image, state, data, shutting_down)
    if new_isr == state.isr:
        return None, state
    policy = eligible_leaders.topic_policy(image, image.topics_by_id[topic_id].name)
    record = eligible_leaders.change(
        topic_id,
        data.partition,
        state,
        isr=new_isr,
        policy=policy,
        acceptable=lambda b: b == broker_id,  # the leader stays: it is in new_isr
    )
    if record is not None and state.reassigning:  # the ISR may now hold every adding replica
        expanded = reassign_ops.merged(state, record.partition_change)
        live = live_broker_ids(image) - set(shutting_down)
        completed = reassign_ops.complete(expanded, policy, live.__contains__, crashed_broker_ids(image))
        if completed is not None:
            record = reassign_ops.change_record(topic_id, data.partition, state, completed)
    return record, state


def elect_leaders(
    image: MetadataImage,
    request: controller_pb2.ElectLeadersRequest,
    may_lead: elections.MayLead = elections.anyone,
) -> Plan:
    """Preferred election: the first replica leads again when it is in the ISR and
    unfenced (and ``may_lead``: it does not report the partition offline). An empty
    request means every partition, and then partitions whose preferred replica already
    leads are left out of the answer."""
    response = controller_pb2.ElectLeadersResponse()
    live = {b.broker_id for b in image.unfenced_brokers()}
    records = []
    for name, partition, state in _elections_asked(image, request, response):
        preferred = state.replicas[0]
        if state.leader == preferred:
            if request.topics:
                response.partitions.add(
                    topic=name,
                    partition=partition,
                    error=ErrorCode.ELECTION_NOT_NEEDED,
                    message=f"broker {preferred} already leads",
                )
            continue
        result = response.partitions.add(topic=name, partition=partition)
        topic_id = image.topic_ids_by_name[name]
        if preferred not in state.isr or preferred not in live:
            result.error = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            result.message = f"preferred replica {preferred} is not an unfenced ISR member"
            continue
        if not may_lead(preferred, topic_id, partition):
            result.error = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            result.message = f"preferred replica {preferred} reports the partition offline (its log failed)"
            continue
        records.append(partition_change(topic_id, partition, leader=preferred))
    return Plan(response, records)


def _elections_asked(
    image: MetadataImage,
    request: controller_pb2.ElectLeadersRequest,
    response: controller_pb2.ElectLeadersResponse,
) -> list[tuple[str, int, PartitionState]]:
    """The partitions to elect; unknown ones are answered here."""
    if not request.topics:
        return [
            (name, partition, state)
            for name, topic_id in sorted(image.topic_ids_by_name.items())
            for partition, state in sorted(image.topics_by_id[topic_id].partitions.items())
        ]
    asked = []
    seen: set[tuple[str, int]] = set()
    for wanted in request.topics:
        topic = image.topic(wanted.topic)
        ids = list(wanted.partitions) or (sorted(topic.partitions) if topic is not None else [-1])
        for partition in ids:
            state = None if topic is None else topic.partitions.get(partition)
            if (wanted.topic, partition) in seen:
                continue
            seen.add((wanted.topic, partition))
            if state is None:
                response.partitions.add(
                    topic=wanted.topic,
                    partition=partition,
                    error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    message=f"no partition {wanted.topic}-{partition}",
                )
                continue
            asked.append((wanted.topic, partition, state))
    return asked


def allocate_producer_ids(image: MetadataImage, request: controller_pb2.AllocateProducerIdsRequest) -> Plan:
    response = controller_pb2.AllocateProducerIdsResponse()
    try:
        registered(image, request.broker_id, request.broker_epoch)
    except ValidationError as e:
        return refuse(response, e.code, e.message)
    response.producer_id_start = image.next_producer_id
    response.producer_id_len = PRODUCER_ID_BLOCK
    record = metadata_pb2.ProducerIdsRecord(
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        next_producer_id=image.next_producer_id + PRODUCER_ID_BLOCK,
    )
    return Plan(response, [MetadataRecord(producer_ids=record)])


def describe_cluster(
    image: MetadataImage, cluster_id: str, controller_id: int, shutting_down: Collection[int]
) -> controller_pb2.DescribeClusterResponse:
    response = controller_pb2.DescribeClusterResponse(cluster_id=cluster_id, controller_id=controller_id)
    for broker_id, broker in sorted(image.brokers.items()):
        response.brokers.add(
            broker_id=broker_id,
            endpoints=[
                metadata_pb2.BrokerEndpoint(name=e.name, host=e.host, port=e.port) for e in broker.endpoints
            ],
            rack=broker.rack,
            fenced=broker.fenced,
            epoch=broker.epoch,
            in_controlled_shutdown=broker_id in shutting_down,
        )
    return response

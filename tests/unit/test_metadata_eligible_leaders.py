"""KIP-966 eligible leader replicas and KIP-903 broker epochs in AlterPartition, on the
controller: one partition, RF 3, min.insync.replicas 2, brokers 101-103.

The story each test tells: the ISR loses members; those lost while it is below
min.insync.replicas hold every committed record (the ELR); when the ISR empties the
ELR is elected from, never a replica whose data is gone (registered with another log
directory: a wiped or new disk; or reporting the partition's folder wiped), and one that
crashed with its directory intact (no clean-shutdown marker naming its last broker epoch:
killed, power cut) only when no replica that did not crash can be; and a leader cannot
add a replica to the ISR on the strength of fetches from an incarnation that has since died.
"""

from __future__ import annotations

import pytest

from raftka.metadata import broker_ops, records
from raftka.metadata.controller import QuorumController
from raftka.metadata.delta import ReplayError
from raftka.metadata.image import EMPTY, PartitionState
from raftka.metadata.records import RecordError
from raftka.metadata.snapshot import decode_image, encode_image
from raftka.v1 import controller_pb2 as pb
from raftka.v1 import metadata_pb2
from tests.metadata_sim.quorum import Member
from tests.unit import metadata_support as m
from tests.unit.metadata_controller_support import E, create, heartbeat, live_brokers, register, run, single


def state_of(member: Member) -> PartitionState:
    return member.image.topic("t").partitions[0]  # type: ignore[union-attr]


def new_disk(broker_id: int) -> bytes:
    """The id of a log directory that replaced ``broker_id``'s (``m.log_dir_id``)."""
    return (1000 + broker_id).to_bytes(16, "big")


async def restart(
    c: QuorumController,
    broker_id: int,
    incarnation: str,
    previous_epoch: int | None,
    log_dir_id: bytes | None = None,
    *,
    wiped: list[pb.OfflineTopicReplicas] | None = None,
) -> int:
    """A new incarnation of ``broker_id`` registers and is unfenced; its epoch.
    ``previous_epoch``: what its clean-shutdown marker says (None: no marker);
    ``log_dir_id``: its log directory's (by default the one it registered before);
    ``wiped``: the partitions whose folder it did not find, as its heartbeat lists them."""
    request = pb.BrokerRegistrationRequest(
        broker_id=broker_id,
        incarnation_id=incarnation,
        listeners=[metadata_pb2.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id)],
        log_dir_id=m.log_dir_id(broker_id) if log_dir_id is None else log_dir_id,
    )
    if previous_epoch is not None:
        request.previous_broker_epoch = previous_epoch
    response = await c.register_broker(request)
    assert response.status.error == E.NONE, response.status
    assert not (await heartbeat(c, broker_id, response.broker_epoch, wiped_replicas=wiped or [])).is_fenced
    return response.broker_epoch


async def partition_with_min_isr_2(c: QuorumController) -> tuple[dict[int, int], int, int, int]:
    """Epochs, and the partition's leader and two followers in replica order."""
    epochs = await live_brokers(c)
    await create(c, "t", 1, 3, **{"min.insync.replicas": "2"})
    return epochs, *(await _roles(c))


async def all_fenced(c: QuorumController) -> tuple[dict[int, int], int, int, int]:
    """``partition_with_min_isr_2``, then its followers and its leader fenced in that order:
    the partition offline, its ELR the leader then ``y``."""
    epochs, leader, x, y = await partition_with_min_isr_2(c)
    for broker_id in (x, y, leader):
        await heartbeat(c, broker_id, epochs[broker_id], want_fence=True)
    return epochs, leader, x, y


async def _roles(c: QuorumController) -> tuple[int, int, int]:
    image = c.latest_image
    assert image is not None
    state = image.topic("t").partitions[0]  # type: ignore[union-attr]
    first, second = (b for b in state.replicas if b != state.leader)
    return state.leader, first, second


def test_a_member_lost_while_the_isr_is_below_min_isr_becomes_eligible_one_lost_before_does_not() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await partition_with_min_isr_2(c)

        await heartbeat(c, x, epochs[x], want_fence=True)
        after_x = state_of(member)
        assert (after_x.isr, after_x.elr) == (tuple(b for b in after_x.replicas if b != x), ()), (
            "the ISR kept min.insync.replicas members: x may miss what is committed next"
        )

        await heartbeat(c, y, epochs[y], want_fence=True)
        after_y = state_of(member)
        assert (after_y.leader, after_y.isr, after_y.elr) == (leader, (leader,), (y,)), after_y
        assert after_y.last_known_elr == ()
        await quorum.close()

    run(body)


def test_the_leader_dying_with_isr_of_itself_and_an_elr_member_alive_elects_that_member() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await partition_with_min_isr_2(c)
        await heartbeat(c, x, epochs[x], want_fence=True)
        await heartbeat(c, y, epochs[y], want_fence=True)
        await heartbeat(c, y, epochs[y])  # y is back, unfenced, still out of the ISR: in the ELR
        before = state_of(member)
        assert (before.isr, before.elr) == ((leader,), (y,)), before

        await heartbeat(c, leader, epochs[leader], want_fence=True)
        after = state_of(member)
        assert (after.leader, after.isr, after.elr) == (y, (y,), (leader,)), after
        assert after.leader_epoch == before.leader_epoch + 1
        await quorum.close()

    run(body)


def test_a_leader_that_returns_wiped_is_not_elected_and_a_cleanly_restarted_elr_member_is() -> None:
    """The issue's scenario: both followers stop (y last, so it is eligible), the leader is
    killed and comes back with an empty disk. It must not lead; y, restarted cleanly, does."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await partition_with_min_isr_2(c)
        await heartbeat(c, x, epochs[x], want_fence=True)
        await heartbeat(c, y, epochs[y], want_fence=True)
        await heartbeat(c, leader, epochs[leader], want_fence=True)
        offline = state_of(member)
        assert (offline.leader, offline.isr, offline.elr) == (-1, (), (leader, y)), offline

        await restart(c, leader, "wiped", previous_epoch=None, log_dir_id=new_disk(leader))
        still = state_of(member)
        assert (still.leader, still.isr, still.elr) == (-1, (), (y,)), "an unclean restart is not eligible"
        assert still.last_known_elr == (leader,)

        await restart(c, x, "x-again", previous_epoch=epochs[x])
        assert state_of(member).leader == -1, "x left while the ISR was large enough: not eligible"

        await restart(c, y, "y-again", previous_epoch=epochs[y])
        online = state_of(member)
        assert (online.leader, online.isr, online.elr) == (y, (y,), ()), online
        assert online.leader_epoch == offline.leader_epoch + 1
        await quorum.close()

    run(body)


def test_eligible_members_back_on_replaced_directories_leave_the_partition_offline() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await all_fenced(c)
        for broker_id in (leader, y):
            await restart(c, broker_id, f"{broker_id}-unclean", None, new_disk(broker_id))
        await restart(c, x, "x-clean", previous_epoch=epochs[x])
        offline = state_of(member)
        assert (offline.leader, offline.isr, offline.elr) == (-1, (), ()), offline
        assert set(offline.last_known_elr) == {leader, y}, "for an operator choosing an unclean election"
        await quorum.close()

    run(body)


def test_a_clean_restart_with_a_marker_naming_an_older_registration_counts_as_a_crash() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await all_fenced(c)
        await restart(c, y, "y-stale-marker", previous_epoch=epochs[y] - 1)
        assert member.image.brokers[y].crashed
        await quorum.close()

    run(body)


def test_a_whole_cluster_killed_at_once_with_intact_directories_gets_its_leader_back() -> None:
    """SIGKILL of every broker (a reboot, a power cut): each registers again, sessions
    still live, without a clean-shutdown marker but with the directory it registered
    before. Those that left the ISR while it was below min.insync.replicas hold every
    committed record up to their last flush: the partition elects one of them."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        _, leader, x, y = await partition_with_min_isr_2(c)
        epochs = {b: await register(c, b, incarnation=f"{b}-after-kill") for b in (leader, x, y)}
        offline = state_of(member)
        assert (offline.leader, offline.isr, set(offline.elr)) == (-1, (), {x, y}), offline
        assert all(member.image.brokers[b].crashed for b in (leader, x, y))

        for broker_id in (leader, x, y):
            assert not (await heartbeat(c, broker_id, epochs[broker_id])).is_fenced
        back = state_of(member)
        assert back.leader in (x, y) and back.isr == (back.leader,), back
        assert back.leader_epoch > offline.leader_epoch
        await quorum.close()

    run(body)


def test_a_replica_back_on_a_replaced_directory_is_not_elected_while_one_that_crashed_can_be() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        _, leader, x, y = await partition_with_min_isr_2(c)
        epochs = {
            leader: await register(c, leader, incarnation="leader-killed"),
            x: await register(c, x, incarnation="x-new-disk", log_dir_id=new_disk(x)),
            y: await register(c, y, incarnation="y-killed"),
        }
        offline = state_of(member)
        assert (offline.leader, offline.isr, offline.elr) == (-1, (), (y,)), "x holds nothing: not eligible"
        assert x in offline.last_known_elr and not member.image.brokers[x].crashed

        for broker_id in (leader, x):
            await heartbeat(c, broker_id, epochs[broker_id])
        assert state_of(member).leader == -1, "x is live but its directory was replaced"
        await heartbeat(c, y, epochs[y])
        assert (state_of(member).leader, state_of(member).isr) == (y, (y,))
        await quorum.close()

    run(body)


def test_a_replica_reporting_the_partition_folder_wiped_is_not_elected_while_one_that_crashed_can_be() -> (
    None
):
    """The directory is the same, but the partition's folder was gone at the broker's start:
    the heartbeat that unfences it lists the partition, which it leaves the ELR of."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        _, leader, x, y = await partition_with_min_isr_2(c)
        topic_id = member.image.topic_ids_by_name["t"]
        epochs = {b: await register(c, b, incarnation=f"{b}-after-kill") for b in (leader, x, y)}
        assert set(state_of(member).elr) == {x, y}

        wiped = [pb.OfflineTopicReplicas(topic_id=topic_id, partitions=[0])]
        assert not (await heartbeat(c, x, epochs[x], wiped_replicas=wiped)).is_fenced
        still = state_of(member)
        assert (still.leader, still.elr, still.last_known_elr) == (-1, (y,), (x,)), still
        await heartbeat(c, y, epochs[y])
        assert (state_of(member).leader, state_of(member).isr) == (y, (y,))
        await quorum.close()

    run(body)


def test_of_elr_members_that_crashed_only_the_last_isr_member_is_elected() -> None:
    """y leaves the ISR (a power cut, say: its unflushed tail is gone), then the leader,
    the last ISR member, is killed. y comes back first: it may lack records the leader
    holds, so the partition waits for the leader, whose log is the longest."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await all_fenced(c)
        assert state_of(member).elr == (leader, y), "the last to leave the ISR first"

        await restart(c, y, "y-after-power-cut", previous_epoch=None)
        waiting = state_of(member)
        assert (waiting.leader, waiting.elr) == (-1, (leader, y)), waiting
        await restart(c, leader, "leader-after-kill", previous_epoch=None)
        back = state_of(member)
        assert (back.leader, back.isr, back.elr) == (leader, (leader,), (y,)), back
        await quorum.close()

    run(body)


def test_a_crashed_last_isr_member_waits_for_an_elr_member_that_may_return_clean() -> None:
    """Issue 30: y left the ISR (below min.insync.replicas, so holding every committed
    record), then the leader lost power. The leader comes back first, crashed: it may have
    lost records y holds, so it is not elected while y is away; y comes back from a clean
    stop and leads. (Before, the leader was elected at once and y truncated to it.)"""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await all_fenced(c)
        assert state_of(member).elr == (leader, y)

        await restart(c, leader, "leader-after-power-cut", previous_epoch=None)
        waiting = state_of(member)
        assert (waiting.leader, waiting.elr) == (-1, (leader, y)), "y may return with more"
        await restart(c, y, "y-after-clean-stop", previous_epoch=epochs[y])
        back = state_of(member)
        assert (back.leader, back.isr, back.elr) == (y, (y,), (leader,)), back
        await quorum.close()

    run(body)


def test_a_full_list_of_wiped_partitions_is_handled_before_the_broker_is_unfenced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One heartbeat lists at most OFFLINE_REPLICAS_MAX (1 here): a full list may leave
    more out, so the broker stays fenced until a heartbeat lists fewer."""
    monkeypatch.setattr(broker_ops, "OFFLINE_REPLICAS_MAX", 1)

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        _, leader, x, y = await partition_with_min_isr_2(c)
        topic_id = member.image.topic_ids_by_name["t"]
        epochs = {b: await register(c, b, incarnation=f"{b}-after-kill") for b in (leader, x, y)}
        wiped = [pb.OfflineTopicReplicas(topic_id=topic_id, partitions=[0])]

        assert (await heartbeat(c, y, epochs[y], wiped_replicas=wiped)).is_fenced
        handled = state_of(member)
        assert (handled.leader, handled.elr) == (-1, (x,)) and member.image.brokers[y].fenced, handled
        assert not (await heartbeat(c, y, epochs[y])).is_fenced
        assert state_of(member).leader == -1, "y holds nothing of the partition"
        await quorum.close()

    run(body)


async def two_elr_members_back(
    c: QuorumController, member: Member, left_last: str, crashed: str
) -> tuple[int, int, int, dict[int, int]]:
    """min.insync.replicas 3: the followers ``first`` and ``second`` (in replica order) leave
    the ISR, ``left_last`` last, and restart (``crashed`` without a marker, the other
    cleanly); both unfenced, out of the ISR, in the ELR. The leader, its epochs."""
    epochs = await live_brokers(c)
    await create(c, "t", 1, 3, **{"min.insync.replicas": "3"})
    leader, first, second = await _roles(c)
    named = {"first": first, "second": second}
    last = named[left_last]
    for broker_id in (next(b for b in (first, second) if b != last), last):
        await heartbeat(c, broker_id, epochs[broker_id], want_fence=True)
    assert state_of(member).elr[0] == last, "the last to leave the ISR comes first"
    for name, broker_id in named.items():
        await restart(c, broker_id, f"{name}-again", None if name == crashed else epochs[broker_id])
    return leader, first, second, epochs


def test_the_elr_member_that_left_the_isr_last_is_elected_first() -> None:
    """It was in the ISR longest, the last leader as a rule: its log is the longest."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        leader, first, second, epochs = await two_elr_members_back(c, member, left_last="second", crashed="")
        await heartbeat(c, leader, epochs[leader], want_fence=True)
        after = state_of(member)
        assert (after.leader, after.isr, after.elr) == (second, (second,), (leader, first)), after
        await quorum.close()

    run(body)


def test_an_elr_member_that_did_not_crash_is_elected_before_one_that_did() -> None:
    """The one that crashed left the ISR last, but may lack its unflushed tail: the other
    leads, and the crashed one stays eligible."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        leader, first, second, epochs = await two_elr_members_back(
            c, member, left_last="first", crashed="first"
        )
        assert member.image.brokers[first].crashed and not member.image.brokers[second].crashed
        await heartbeat(c, leader, epochs[leader], want_fence=True)
        after = state_of(member)
        assert (after.leader, after.isr, after.elr) == (second, (second,), (leader, first)), after
        await quorum.close()

    run(body)


def alter(
    leader: int, epochs: dict[int, int], state: PartitionState, topic_id: bytes, member_epochs: list[int]
) -> pb.AlterPartitionRequest:
    """The leader asks for every replica in the ISR, naming ``member_epochs`` for them."""
    request = pb.AlterPartitionRequest(broker_id=leader, broker_epoch=epochs[leader])
    request.topics.add(topic_id=topic_id).partitions.add(
        partition=0,
        leader_epoch=state.leader_epoch,
        new_isr=list(state.replicas),
        partition_epoch=state.partition_epoch,
        new_isr_broker_epochs=member_epochs,
    )
    return request


def test_alter_partition_refuses_a_member_whose_broker_epoch_is_not_its_current_one() -> None:
    """KIP-903: the leader saw x fetch at x's old epoch; x has restarted (its disk wiped)
    since. Adding it on those fetches would put an empty log in the ISR."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await partition_with_min_isr_2(c)
        topic_id = member.image.topic_ids_by_name["t"]
        await heartbeat(c, x, epochs[x], want_fence=True)
        await heartbeat(c, y, epochs[y], want_fence=True)
        await heartbeat(c, y, epochs[y])
        new_x = await restart(c, x, "x-wiped", None, new_disk(x))
        state = state_of(member)
        order = list(state.replicas)

        def epochs_for(x_epoch: int) -> list[int]:
            return [{leader: epochs[leader], x: x_epoch, y: epochs[y]}[b] for b in order]

        for member_epochs, problem in (
            (epochs_for(epochs[x]), "restarted since the leader saw it fetch"),
            (epochs_for(-1), "without its broker epoch"),
        ):
            refused = await c.alter_partition(alter(leader, epochs, state, topic_id, member_epochs))
            [result] = refused.partitions
            assert result.error == E.INELIGIBLE_REPLICA and problem in result.message, result
            assert state_of(member) == state, "nothing written"
        [short] = (
            await c.alter_partition(alter(leader, epochs, state, topic_id, [epochs[leader]]))
        ).partitions
        assert short.error == E.INVALID_REQUEST and "new_isr_broker_epochs" in short.message

        [ok] = (await c.alter_partition(alter(leader, epochs, state, topic_id, epochs_for(new_x)))).partitions
        assert ok.error == E.NONE, ok
        full = state_of(member)
        assert (full.isr, full.elr, full.last_known_elr) == (state.replicas, (), ()), (
            "min.insync.replicas again: no ELR needed"
        )
        await quorum.close()

    run(body)


def test_the_elr_survives_a_snapshot() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await all_fenced(c)
        await restart(c, leader, "wiped", None, new_disk(leader))
        image = member.image
        assert decode_image(encode_image(image)) == image
        assert state_of(member).elr and state_of(member).last_known_elr
        await quorum.close()

    run(body)


async def set_config(c: QuorumController, key: str, value: str) -> None:
    op = pb.AlterConfigOp(name=key, value=value, op=pb.ALTER_CONFIG_SET)
    response = await c.alter_configs(
        pb.AlterConfigsRequest(topics=[pb.AlterTopicConfigs(topic="t", ops=[op])])
    )
    assert response.status.error == E.NONE and response.topics[0].error == E.NONE, response


def test_a_lower_min_isr_that_the_isr_meets_empties_the_elr_and_a_higher_one_keeps_it() -> None:
    """Lowered to what the ISR has, the high watermark moves again without the ELR member,
    which may then miss committed records: it is no longer eligible."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await partition_with_min_isr_2(c)
        await heartbeat(c, x, epochs[x], want_fence=True)
        await heartbeat(c, y, epochs[y], want_fence=True)
        assert state_of(member).elr == (y,)
        await set_config(c, "min.insync.replicas", "3")
        assert state_of(member).elr == (y,), "the ISR is further below it: y still holds every commit"
        await set_config(c, "min.insync.replicas", "1")
        after = state_of(member)
        assert (after.isr, after.elr, after.leader) == ((leader,), (), leader), after
        await quorum.close()

    run(body)


def test_unclean_leader_election_enable_brings_back_a_partition_whose_eligible_replicas_lost_their_disks() -> (
    None
):
    """With nothing eligible left the partition waits; the operator may choose availability
    (Kafka's unclean.leader.election.enable): the first last known ELR member back leads."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await all_fenced(c)
        for broker_id in (leader, y):
            await restart(c, broker_id, f"{broker_id}-unclean", None, new_disk(broker_id))
        offline = state_of(member)
        assert offline.leader == -1

        await set_config(c, "unclean.leader.election.enable", "true")
        online = state_of(member)
        first = next(b for b in online.replicas if b in offline.last_known_elr)
        assert (online.leader, online.isr, online.elr, online.last_known_elr) == (first, (first,), (), ())
        assert online.leader_epoch == offline.leader_epoch + 1
        await quorum.close()

    run(body)


def test_unclean_leader_election_enable_passes_over_a_broker_that_reports_the_partition_offline() -> None:
    """The operator's unclean election chooses among brokers that may lead there: the last
    known ELR member it would take first, reporting the partition's log offline (a failed
    disk), is passed over for the next, as every other election of the controller does."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs, leader, x, y = await all_fenced(c)
        restarted = {b: await restart(c, b, f"{b}-unclean", None, new_disk(b)) for b in (leader, y)}
        offline = state_of(member)
        first = next(b for b in offline.replicas if b in offline.last_known_elr)
        assert offline.leader == -1, offline
        tid = member.image.topic_ids_by_name["t"]
        reported = await c.broker_heartbeat(
            pb.BrokerHeartbeatRequest(
                broker_id=first,
                broker_epoch=restarted[first],
                current_metadata_offset=restarted[first],
                offline_replicas=[pb.OfflineTopicReplicas(topic_id=tid, partitions=[0])],
            )
        )
        assert reported.status.error == E.NONE, reported.status

        await set_config(c, "unclean.leader.election.enable", "true")
        online = state_of(member)
        assert online.leader not in (-1, first), online
        assert online.isr == (online.leader,)
        await quorum.close()

    run(body)


def test_an_elr_outside_the_replicas_or_overlapping_the_isr_is_refused_by_check_and_replay() -> None:
    tid = m.topic_id(1)
    image = m.replay(EMPTY, *(m.register(b, b, fenced=False) for b in (1, 2, 3)), m.topic("t", tid))
    overlapping = m.partition(tid, 0, [1, 2, 3], isr=[1], leader=1)
    overlapping.partition.elr.extend([1, 2])
    with pytest.raises(RecordError, match="PartitionRecord.elr"):
        records.check(overlapping)
    image = m.replay(image, m.partition(tid, 0, [1, 2, 3], isr=[1], leader=1))
    outside = m.change(tid, 0)
    outside.partition_change.elr.ids.append(4)
    with pytest.raises(ReplayError, match="elr \\[4\\] is not within replicas"):
        m.replay(image, outside)
    into_isr = m.change(tid, 0, isr=[1, 2])
    into_isr.partition_change.elr.ids.append(2)
    with pytest.raises(ReplayError, match="apart from isr"):
        m.replay(image, into_isr)


def test_a_single_replica_partition_elects_its_replica_back_after_an_unclean_restart() -> None:
    """No other copy exists to wait for: staying offline would only wait for an operator
    whose unclean election could choose nothing else."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 1, 1)
        [only] = state_of(member).replicas
        await heartbeat(c, only, epochs[only], want_fence=True)
        assert (state_of(member).leader, state_of(member).elr) == (-1, (only,))
        await restart(c, only, "killed", previous_epoch=None)
        back = state_of(member)
        assert (back.leader, back.isr, back.elr, back.last_known_elr) == (only, (only,), (), ())
        await quorum.close()

    run(body)

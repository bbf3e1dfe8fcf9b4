"""A reassignment as the brokers live it (``tests.unit.test_replication``'s brokers in one
process): the replicas change within the leader's epoch, the added broker starts
following from the log start, the leader takes it into the ISR once it caught up, and,
the reassignment completed, the removed broker stops and deletes its log."""

from __future__ import annotations

from pathlib import Path

from raftka.broker.partitions import Role
from tests.unit.test_replication import Cluster, E, produce_request, result_of, run


def test_an_added_replica_catches_up_joins_the_isr_and_the_removed_one_deletes_its_log(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        cluster.publish(replicas=(1, 2), isr=(1, 2), leader_epoch=1, partition_epoch=1)  # 3 holds nothing
        leader, newcomer = cluster.nodes[1], cluster.nodes[3]
        assert newcomer.partition is None
        values = [b"%d" % i for i in range(20)]
        assert result_of(await leader.replicas.produce(produce_request(values, acks=1))).error == E.NONE
        await cluster.catch_up(2)

        epoch = cluster.state.leader_epoch
        cluster.publish(replicas=(3, 2, 1), adding_replicas=(3,), removing_replicas=(1,), partition_epoch=2)
        assert newcomer.partition.role is Role.FOLLOWER and leader.partition.leader_epoch == epoch
        await cluster.catch_up(3)
        assert newcomer.values() == values
        assert leader.isr_requests[-1] == (3, 2, 1)  # in replica order, as the leader asks

        cluster.publish(
            replicas=(3, 2),
            isr=(3, 2),
            leader=3,
            leader_epoch=epoch + 1,
            adding_replicas=(),
            removing_replicas=(),
            partition_epoch=3,
        )
        assert leader.partition is None
        assert leader.logs.names() == [] and not [p for p in leader.logs.directory.rglob("*.log")]
        assert newcomer.partition.is_leader and newcomer.values() == values

    run(body())

"""Deterministic simulation of the data plane: three brokers running the real replication
code (``ReplicaManager``, ``FollowerFetch``, ``Partition``, ``PartitionLog`` on real files)
for a topic of 2-4 partitions and the real group and transaction coordinators, the
controller's real broker, group and transaction handlers, acks=all, idempotent and
transactional producers, a consumer and a consumer group's members, on one seeded scheduler (``python -m tests.datasim``, ``make sim-data``).

The fault budget, which is what RF 3 / min.insync.replicas 2 promise to survive without
losing an acknowledged record: one broker at a time is *impaired* (crashed, power cut
with every unsynced write lost, disk wiped, cut off from everyone, or from the
controller alone), and a broker stays impaired until it is back up, registered under its
new incarnation, unfenced, and back in the ISR with no link cut; only then may the next
fault start. Slow and lossy links are allowed at any time. So every acknowledged record,
which was on every member of an ISR of at least two when it was acknowledged, is in the
page cache of at least two brokers whenever a fault starts, and one fault takes at most
one copy. Beyond the budget (two brokers' power lost together, say), Kafka's replication
without fsync (``flush.messages``) promises nothing, and the simulation does not go there.
The group's members crash and leave outside this budget: the group's safety rests on the
controller's log, not on the replicas.
"""

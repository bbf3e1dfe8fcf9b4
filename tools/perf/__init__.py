"""The benchmarks: ``raftka perf KIND`` (the quorum, the metadata RPCs, produce/consume
with raftka's clients and with librdkafka, fetch sessions, quotas, rebalances,
reassignment, transactions, the Spark audit, stability over hours) and ``make
bench-kafka`` (raftka beside Tansu under one librdkafka load), with what they measure
with: latency percentiles (``latency``), CPU and memory of the cluster's processes read
from /proc (``proc_cpu``, ``proc_memory``)."""

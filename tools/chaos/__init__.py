"""The fault injection: ``raftka chaos KIND`` kills or pauses the quorum leader or a
partition leader, cuts the power of unflushed tails (``power_cut``), and partitions,
drops or delays a broker's traffic in network namespaces (``netns``, ``delay_proxy``),
each under load, timing the failover and auditing that nothing acknowledged was lost."""

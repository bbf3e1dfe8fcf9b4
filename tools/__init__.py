"""What measures and breaks a raftka cluster, kept apart from the admin commands
(``raftka.cli``) as Kafka keeps its perf tools in ``tools/`` and its fault injector in
``trogdor/``: ``perf`` holds the benchmarks (``raftka perf ...``, ``make bench-kafka``),
``chaos`` the fault injection (``raftka chaos ...``). Both are reached through the one
``raftka`` command; they use the command plumbing in ``raftka.command`` and never import
``raftka.cli``."""

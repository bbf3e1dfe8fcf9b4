"""raftka: a KRaft-style Raft quorum (sans-I/O core, storage, driver, transports)."""

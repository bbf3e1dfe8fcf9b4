"""A node process around the quorum: its configuration file, its logging, the assembly
of storage, core, transport and driver around a state machine, and the journal test
node. ``raftka.raft`` is the quorum alone and knows none of this."""

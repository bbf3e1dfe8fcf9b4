"""gRPC client plumbing shared by every caller of raftka's services (``raftka.rpc.stubs``)."""

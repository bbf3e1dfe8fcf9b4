"""Audits of the cluster's history: the metadata log files read back, replayed and checked.

Decoding, replay and checks are plain Python (``raftka.audit.decode``, ``raftka.audit.replay``,
``raftka.audit.checks``) and run without a JVM; ``raftka.audit.source`` and ``raftka.audit.job`` put them
under Spark. pyspark is imported only in the modules that need it, so ``import audit``
costs nothing on a machine without Java.
"""

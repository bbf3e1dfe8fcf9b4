"""What every part of the ``raftka`` command shares, admin commands (``raftka.cli``) and
tools (``raftka.tools``) alike: the error a user can act on (``errors``), tables or JSON
(``output``), the flags that say where a cluster is and how to reach it (``data_args``,
``tls_args``), the local cluster's state (``local``) and DescribeQuorum
(``quorum_client``). It imports client, node and security code, never ``raftka.cli``."""

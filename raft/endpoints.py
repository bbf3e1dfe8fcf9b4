"""Where the controllers are: data in the log, not configuration (KIP-853).

Every node resolves a controller's id to an address here, and only here: the raft
transport's peers, the broker's line to the active controller, a standby's
``NOT_CONTROLLER`` answer, the journal's ``NOT_LEADER`` answer, ``DescribeQuorum``. The
voter set in effect (``RaftCore.voter_set``: the latest VotersRecord this node holds, else
its snapshot's or bootstrap set) names each voter's endpoints; the static
``controller.quorum.voters`` only bootstraps, as Kafka's
``controller.quorum.bootstrap.servers`` does. It answers for a voter the log names no
endpoint for: every voter of a static quorum, and a node that has not replayed the first
VotersRecord yet (whose voter set is then the configured one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from raftka.raft.voters import VoterSet


class VoterEndpoints:
    def __init__(self, configured: Mapping[int, str], voter_set: Callable[[], VoterSet]) -> None:
        self._configured = dict(configured)
        self._voter_set = voter_set

    def address(self, node_id: int) -> str:
        """``node_id``'s address: its first endpoint in the voter set, else the configured
        one; "" for a node neither names (no leader, or one this node has not heard of)."""
        voter = self._voter_set().get(node_id)
        if voter is not None and voter.endpoints:
            return voter.endpoints[0]
        return self._configured.get(node_id, "")

    def voters(self) -> dict[int, str]:
        """The voters in effect with an address, by id ascending: whom to ask when no leader
        is known. The configured list when none has an address, so there is always one."""
        found = {v.node_id: a for v in self._voter_set().voters() if (a := self.address(v.node_id))}
        return found or dict(sorted(self._configured.items()))

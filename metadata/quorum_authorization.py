"""Who may call the Raft service's methods (with mutual TLS on), on every node.

- ``Exchange``: controller and broker certificates only; each request on the stream is
  then judged by its sender's role (``raftka.security.quorum_gate``).
- ``DescribeQuorum``: DESCRIBE on the cluster (Kafka's rule): the answer lists every
  voter and observer with its directory id and address.
- ``AddRaftVoter``, ``RemoveRaftVoter``: ALTER on the cluster (Kafka's rule). A broker's
  identity can never be a voter: adding a node known as a broker (one registered in the
  metadata, or seen fetching the log with a broker's certificate) is refused, naming why,
  whoever asks. A voter must vote, and the quorum gate lets only controller certificates
  vote: a broker made a voter would count towards the majority and never answer.
- ``UpdateRaftVoter``: CLUSTER_ACTION from the voter itself: only controller N's
  certificate updates voter N's endpoints (Kafka's controllers send it for themselves).

No broker forwards these calls, so a principal a broker's call claims to forward for is
ignored: the caller's own certificate is judged. Refusals are ``PERMISSION_DENIED`` (the
Raft responses have no ``status``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftka.metadata import acls
from raftka.metadata.acls import Authorizer
from raftka.metadata.authorization import cluster_rule
from raftka.security.grpc_gate import Denial, Rule, by_name
from raftka.security.principal import BROKER, CONTROLLER, Principal
from raftka.v1 import controller_pb2, raft_pb2

E = controller_pb2.ErrorCode
RAFT_SERVICE = raft_pb2.DESCRIPTOR.services_by_name["Raft"]


def quorum_rules(authorizer: Authorizer, is_broker: Callable[[int], bool]) -> dict[str, Rule]:
    """``is_broker(node_id)``: the node is known as a broker (it can never be a voter)."""
    alter = _own(cluster_rule(authorizer, acls.ALTER))

    def add_voter(caller: Principal, forwarded: str | None, request: Any) -> Denial | None:
        if is_broker(request.voter_id):
            return Denial(
                E.INVALID_REQUEST,
                f"voter_id: node {request.voter_id} is a broker, and a broker's identity can never be a voter",
            )
        return alter(caller, forwarded, request)

    return by_name(
        RAFT_SERVICE,
        {
            "Exchange": _quorum_member,
            "DescribeQuorum": _own(cluster_rule(authorizer, acls.DESCRIBE)),
            "AddRaftVoter": add_voter,
            "RemoveRaftVoter": alter,
            "UpdateRaftVoter": _the_voter_itself,
        },
    )


def _own(rule: Rule) -> Rule:
    """``rule`` judging the caller itself, whomever it claims to forward for."""
    return lambda caller, forwarded, request: rule(caller, None, request)


def _quorum_member(caller: Principal, forwarded: str | None, request: Any) -> Denial | None:
    if caller.role in (CONTROLLER, BROKER):
        return None
    return Denial(
        E.CLUSTER_AUTHORIZATION_FAILED, f"{caller} may not join the quorum: it is not a node's certificate"
    )


def _the_voter_itself(caller: Principal, forwarded: str | None, request: Any) -> Denial | None:
    if caller.role == CONTROLLER and caller.node_id == request.voter_id:
        return None
    return Denial(
        E.CLUSTER_AUTHORIZATION_FAILED,
        f"UpdateRaftVoter for voter {request.voter_id} is that controller's own (CLUSTER_ACTION): "
        f"{caller} is not its certificate",
    )

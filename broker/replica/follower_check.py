"""Who may fetch as a follower: the broker that ``replica_id`` names, at its current broker
epoch, unfenced, and (with TLS on) holding that broker's certificate. In Kafka a follower
fetch needs ClusterAction (a broker's principal) and carries the follower's broker epoch
(``ReplicaState``, KIP-903), which keeps a stale incarnation out of the ISR; raftka's
leader refuses such a fetch outright.

A follower's fetch is trusted with more than a consumer's: it reads above the high
watermark, its fetch offset is taken as that replica's log end (so it moves the high
watermark, and with it acks=all), and a caught-up follower is taken into the ISR. Taken
from anyone, it lets a client acknowledge records only the leader holds. So the leader
refuses the whole request unless the claim holds in its own metadata image:

- with TLS, the connection's certificate must be broker ``replica_id``'s
  (CLUSTER_AUTHORIZATION_FAILED), as for the brokers' RPCs to the controller;
- the broker must be registered (BROKER_ID_NOT_REGISTERED), ``replica_epoch`` must be
  its current registration's (STALE_BROKER_EPOCH: an older incarnation, or a newer one
  this leader has not replayed yet, which a retry resolves), and it must be unfenced
  (INELIGIBLE_REPLICA: a fenced broker acts on no partition role).

Whether it is a replica of each partition is checked per partition, as before.

Without TLS nothing proves who sent a request (Kafka's PLAINTEXT is the same): the epoch
check then keeps out an old incarnation of a broker, a fenced one, and clients that guess,
but not a client that reads the broker's epoch from DescribeCluster and copies it.
"""

from __future__ import annotations

from raftka.metadata.authorization import broker_problem
from raftka.metadata.broker_ops import registered
from raftka.metadata.image import MetadataImage
from raftka.metadata.validation import ValidationError
from raftka.security.grpc_gate import Denial
from raftka.security.principal import Principal
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
# What every broker restart brings for a moment: fetches before the leader has replayed the
# new registration, or before the broker is unfenced. The others mean a wrong certificate.
ROUTINE_REFUSALS = frozenset({E.STALE_BROKER_EPOCH, E.BROKER_ID_NOT_REGISTERED, E.INELIGIBLE_REPLICA})


def follower_refusal(
    image: MetadataImage, replica_id: int, replica_epoch: int, principal: Principal | None
) -> Denial | None:
    """Why this fetch may not count as broker ``replica_id``'s, or None if it may."""
    return broker_refusal(
        image, replica_id, replica_epoch, principal, f"Fetch with replica_id {replica_id}", "replica"
    )


def broker_refusal(
    image: MetadataImage,
    broker_id: int,
    broker_epoch: int,
    principal: Principal | None,
    what: str,
    field_prefix: str,
) -> Denial | None:
    """Why a request claiming to be broker ``broker_id``'s at ``broker_epoch`` may not be
    taken as such (the rules above; a transaction marker's caller is checked the same
    way), or None; ``field_prefix`` names the request's fields (``<prefix>_id``, ``_epoch``)."""
    if principal is not None:
        denial = broker_problem(what, principal, broker_id)
        if denial is not None:
            return denial
    try:
        broker = registered(image, broker_id, broker_epoch)
    except ValidationError as e:
        field = f"{field_prefix}_epoch" if e.code == E.STALE_BROKER_EPOCH else f"{field_prefix}_id"
        return Denial(e.code, f"{field}: {e.message}")
    if broker.fenced:
        return Denial(E.INELIGIBLE_REPLICA, f"{field_prefix}_id: broker {broker_id} is fenced")
    return None

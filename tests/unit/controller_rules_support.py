"""The controller's gRPC rules called by a method's short name, as the gate would call them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftka.metadata.acls import Authorizer
from raftka.metadata.authorization import controller_rules
from raftka.security.grpc_gate import Denial


def controller_policy(authorizer: Authorizer) -> Callable[..., Denial | None]:
    """``policy("CreateTopics", caller, forwarded, request)``: the Controller method's rule."""
    rules = controller_rules(authorizer)

    def policy(method: str, *call: Any) -> Denial | None:
        return rules[f"/raftka.v1.Controller/{method}"](*call)

    return policy

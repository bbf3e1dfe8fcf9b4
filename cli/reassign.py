"""``raftka topics reassign`` (kafka-reassign-partitions) and ``raftka brokers drain``.

``topics reassign`` takes Kafka's modes and JSON files (``raftka.metadata.reassign_plan``):
``--generate`` prints the current assignment and a proposal for the topics of
``--topics-to-move-json-file`` over ``--broker-list``; ``--execute`` starts the
reassignment of ``--reassignment-json-file`` (printing the current assignment, to roll
back with); ``--verify`` tells, per partition, whether it completed; ``--cancel`` cancels
the file's partitions. ``--topic T --brokers 1,2,3`` spreads one topic over those brokers
(generate and execute at once).

``brokers drain ID`` moves every replica off a broker, each to the least-loaded broker
its partition lacks (``raftka.metadata.placement.replace_broker``), and waits until the
moves complete (``--no-wait``: returns once they started); the broker can then be
stopped and unregistered. Waiting polls the controller with a bound, ``--wait-s``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from raftka.cli.admin_args import add_connection_options, open_admin
from raftka.client.admin import Admin
from raftka.command import output
from raftka.command.errors import CliError
from raftka.metadata import reassign_plan
from raftka.metadata.image import BrokerRegistration
from raftka.metadata.placement import replace_broker
from raftka.metadata.reassign_plan import Assignment, Key, PlanError
from raftka.metadata.validation import ValidationError

POLL_INTERVAL_S = 0.5
DEFAULT_WAIT_S = 600.0


def add_reassign_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reassign = actions.add_parser(
        "reassign", help="move partitions to other brokers (kafka-reassign-partitions' modes and files)"
    )
    mode = reassign.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", action="store_true", help="propose a plan for --topics-to-move-json-file")
    mode.add_argument("--execute", action="store_true", help="start the plan of --reassignment-json-file")
    mode.add_argument(
        "--verify", action="store_true", help="has the plan of --reassignment-json-file completed"
    )
    mode.add_argument(
        "--cancel", action="store_true", help="cancel the partitions of --reassignment-json-file"
    )
    mode.add_argument(
        "--brokers", metavar="ID,...", help="spread --topic over these brokers (generate + execute)"
    )
    reassign.add_argument("--topics-to-move-json-file", type=Path, metavar="FILE")
    reassign.add_argument("--broker-list", metavar="ID,...", help="--generate: the brokers to place on")
    reassign.add_argument("--reassignment-json-file", type=Path, metavar="FILE")
    reassign.add_argument("--topic", help="--brokers: the topic to spread")
    add_connection_options(reassign)
    reassign.set_defaults(func=run_reassign)


def add_drain_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    drain = actions.add_parser("drain", help="move every replica off a broker, so it can be stopped")
    drain.add_argument("broker_id", type=int, metavar="ID")
    drain.add_argument("--no-wait", action="store_true", help="return once the moves started")
    drain.add_argument(
        "--wait-s",
        type=float,
        default=DEFAULT_WAIT_S,
        help=f"give up waiting after this long (default {DEFAULT_WAIT_S:g})",
    )
    add_connection_options(drain)
    drain.set_defaults(func=run_drain)


def run_reassign(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        if args.generate:
            return _generate(args, admin)
        if args.brokers is not None:
            if not args.topic:
                raise CliError("--brokers: needs --topic")
            current = current_assignment(admin, [args.topic])
            plan = _proposal(current, _broker_ids(args.brokers, "--brokers"), admin)
            return _execute(args, admin, plan, current)
        plan = _read_plan(args, need_replicas=not args.cancel)
        if args.execute:
            return _execute(args, admin, plan, current_assignment(admin, sorted({t for t, _ in plan})))
        if args.verify:
            return _verify(args, admin, plan)
        return _cancel(args, admin, plan)


def run_drain(args: argparse.Namespace) -> int:
    leaving = args.broker_id
    with open_admin(args) as admin:
        brokers = [b for b in admin.describe_cluster().brokers if not b.fenced]
        current = current_assignment(admin)
        registrations = [BrokerRegistration(b.broker_id, "", 0, (), b.rack, False) for b in brokers]
        try:
            plan = replace_broker(registrations, current, leaving)
        except ValidationError as e:
            raise CliError(f"broker {leaving} cannot be drained: {e.message}") from None
        if plan:
            _alter(admin, plan)
        done = not plan or (not args.no_wait and _wait_done(admin, plan, args.wait_s, leaving))
    moved = [_name(k) for k in sorted(plan)]
    view = {"broker": leaving, "moved": moved, "completed": done}
    if args.output == "json":
        print(output.to_json(view))
    elif not plan:
        print(f"Broker {leaving} holds no replicas: it can be stopped and unregistered.")
    elif args.no_wait:
        print(f"Started moving {len(plan)} replicas off broker {leaving}: {', '.join(moved)}.")
        print("Check with 'raftka topics reassign --verify' or 'raftka brokers drain' again.")
    elif done:
        print(f"Moved {len(plan)} replicas off broker {leaving}: {', '.join(moved)}.")
        print(f"Broker {leaving} holds no replicas: it can be stopped and unregistered.")
    else:
        print(f"Broker {leaving} still holds replicas after {args.wait_s:g} s: moves are in progress.")
    return 0 if done or args.no_wait else 1


def current_assignment(admin: Admin, topics: Iterable[str] = ()) -> Assignment:
    """(topic, partition) -> replicas, as the controller has them now; during a move, its
    target (the replicas without those it removes), so a plan made from it never brings
    back a replica that is leaving (a drain during a move grew a partition to RF 4)."""
    described = admin.describe_topics(list(topics))
    for topic in described:
        topic.check()
    return {
        (t.name, p.partition): tuple(r for r in p.replicas if r not in p.removing)
        for t in described
        for p in t.partitions
    }


def _generate(args: argparse.Namespace, admin: Admin) -> int:
    if args.topics_to_move_json_file is None or args.broker_list is None:
        raise CliError("--generate: needs --topics-to-move-json-file and --broker-list")
    try:
        topics = reassign_plan.parse_topics_to_move(_read(args.topics_to_move_json_file))
    except PlanError as e:
        raise CliError(f"{args.topics_to_move_json_file}: {e}") from None
    current = current_assignment(admin, topics)
    proposed = _proposal(current, _broker_ids(args.broker_list, "--broker-list"), admin)
    if args.output == "json":
        print(output.to_json({"current": _plan_view(current), "proposed": _plan_view(proposed)}))
    else:
        print(f"Current partition replica assignment\n{reassign_plan.to_json(current)}\n")
        print(f"Proposed partition reassignment configuration\n{reassign_plan.to_json(proposed)}")
    return 0


def _proposal(current: Assignment, broker_ids: list[int], admin: Admin) -> Assignment:
    racks = {b.broker_id: b.rack for b in admin.describe_cluster().brokers}
    unknown = [b for b in broker_ids if b not in racks]
    if unknown:
        raise CliError(f"broker list: broker {unknown[0]} is not registered")
    try:
        return reassign_plan.propose(current, {b: racks[b] for b in broker_ids})
    except ValidationError as e:
        raise CliError(f"broker list: {e.message}") from None


def _execute(args: argparse.Namespace, admin: Admin, plan: Assignment, current: Assignment) -> int:
    missing = [k for k in sorted(plan) if k not in current]
    if missing:
        raise CliError(f"reassignment: partition {_name(missing[0])} does not exist")
    rollback = {k: current[k] for k in plan}
    _alter(admin, plan)
    names = ",".join(_name(k) for k in sorted(plan))
    if args.output == "json":
        print(output.to_json({"current": _plan_view(rollback), "started": _plan_view(plan)}))
    else:
        print(f"Current partition replica assignment\n\n{reassign_plan.to_json(rollback)}\n")
        print("Save this to use as the --reassignment-json-file option during rollback")
        print(f"Successfully started partition reassignments for {names}")
    return 0


def _verify(args: argparse.Namespace, admin: Admin, plan: Assignment) -> int:
    ongoing = {(r.topic, r.partition) for r in admin.list_partition_reassignments(_by_topic(plan))}
    current = current_assignment(admin, sorted({t for t, _ in plan}))
    statuses = {
        key: "in progress" if key in ongoing else "completed" if current.get(key) == target else "failed"
        for key, target in sorted(plan.items())
    }
    if args.output == "json":
        rows = [
            {"partition": _name(k), "status": s, "replicas": list(current.get(k, ()))}
            for k, s in statuses.items()
        ]
        print(output.to_json(rows))
    else:
        print("Status of partition reassignment:")
        for key, status in statuses.items():
            if status == "failed":
                print(
                    f"There is no active reassignment of partition {_name(key)}, but replica set is "
                    f"{_ids(current.get(key, ()))} rather than {_ids(plan[key])}."
                )
            else:
                print(f"Reassignment of partition {_name(key)} is {status}.")
    return 1 if "failed" in statuses.values() else 0


def _cancel(args: argparse.Namespace, admin: Admin, plan: Assignment) -> int:
    results = admin.alter_partition_reassignments(dict.fromkeys(plan))
    cancelled = [f"{r.topic}-{r.partition}" for r in results if r.error is None]
    failed = [r for r in results if r.error is not None]
    if args.output == "json":
        print(
            output.to_json(
                {
                    "cancelled": cancelled,
                    "failed": [
                        {"partition": f"{r.topic}-{r.partition}", "error": r.error, "message": r.message}
                        for r in failed
                    ],
                }
            )
        )
    else:
        if cancelled:
            print(f"Successfully cancelled partition reassignments for: {','.join(cancelled)}")
        for r in failed:
            print(f"{r.topic}-{r.partition}: {r.error}: {r.message}")
    return 1 if failed else 0


def _alter(admin: Admin, plan: Mapping[Key, tuple[int, ...]]) -> None:
    """Start ``plan``; any partition refused fails the command with the controller's words."""
    for result in admin.alter_partition_reassignments(dict(plan)):
        result.check()


def _wait_done(admin: Admin, plan: Assignment, wait_s: float, leaving: int) -> bool:
    """True once no partition of ``plan`` has a reassignment in progress and none of them
    has ``leaving`` among its replicas (one cancelled meanwhile has); a bounded poll."""
    deadline = time.monotonic() + wait_s
    asked = _by_topic(plan)
    while admin.list_partition_reassignments(asked):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL_S)
    current = current_assignment(admin, asked)
    return not any(leaving in current.get(key, ()) for key in plan)


def _read_plan(args: argparse.Namespace, *, need_replicas: bool) -> Assignment:
    if args.reassignment_json_file is None:
        raise CliError("needs --reassignment-json-file")
    try:
        return reassign_plan.parse_reassignment(
            _read(args.reassignment_json_file), need_replicas=need_replicas
        )
    except PlanError as e:
        raise CliError(f"{args.reassignment_json_file}: {e}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise CliError(f"{path}: {e.strerror}") from None


def _broker_ids(text: str, flag: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliError(f"{flag}: expected broker ids separated by commas, got {text!r}") from None
    if not ids or len(set(ids)) != len(ids):
        raise CliError(f"{flag}: expected distinct broker ids, got {text!r}")
    return ids


def _by_topic(plan: Iterable[Key]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(plan):
        topics.setdefault(topic, []).append(partition)
    return topics


def _plan_view(plan: Assignment) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(plan.items())]


def _name(key: Key) -> str:
    return f"{key[0]}-{key[1]}"


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)

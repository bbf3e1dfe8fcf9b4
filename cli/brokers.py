"""``raftka brokers list``: the registered brokers as the active controller sees them;
``raftka brokers drain ID``: move every replica off one (``raftka.cli.reassign``);
``raftka brokers unregister ID``: Kafka's ``kafka-cluster unregister --id ID``."""

from __future__ import annotations

import argparse
from typing import Any

from raftka.cli import reassign
from raftka.cli.admin_args import add_connection_options, open_admin
from raftka.client.types import BrokerInfo
from raftka.command import output


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    brokers = commands.add_parser("brokers", help="inspect the registered brokers")
    actions = brokers.add_subparsers(dest="action", required=True, metavar="ACTION")
    list_cmd = actions.add_parser("list", help="id, address, rack, fenced and epoch of every broker")
    add_connection_options(list_cmd)
    list_cmd.set_defaults(func=run_list)
    reassign.add_drain_parser(actions)
    unregister = actions.add_parser(
        "unregister",
        help="remove a broker's registration: it leaves every ISR, its partitions elect new leaders; "
        "back with its id, it is a new broker",
    )
    unregister.add_argument("broker_id", type=int, metavar="ID")
    add_connection_options(unregister)
    unregister.set_defaults(func=run_unregister)


def run_unregister(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        admin.unregister_broker(args.broker_id)
    if args.output == "json":
        print(output.to_json({"broker": args.broker_id, "unregistered": True}))
    else:
        print(f"Unregistered broker {args.broker_id}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        cluster = admin.describe_cluster()
    rows = [broker_view(b) for b in cluster.brokers]
    if args.output == "json":
        print(output.to_json(rows))
    else:
        print(
            output.table(
                ("ID", "ADDRESS", "RACK", "FENCED", "EPOCH", "SHUTTING_DOWN"),
                [
                    (
                        r["id"],
                        r["address"],
                        r["rack"] or None,
                        r["fenced"],
                        r["epoch"],
                        r["in_controlled_shutdown"],
                    )
                    for r in rows
                ],
            )
        )
        print(f"Active controller: {cluster.controller_id}")
    return 0


def broker_view(broker: BrokerInfo) -> dict[str, Any]:
    return {
        "id": broker.broker_id,
        "address": broker.data_address,
        "listeners": [f"{e.name}://{e.address}" for e in broker.endpoints],
        "rack": broker.rack,
        "fenced": broker.fenced,
        "epoch": broker.epoch,
        "in_controlled_shutdown": broker.in_controlled_shutdown,
    }

"""``raftka transactions list|describe``: kafka-transactions for raftka, with its columns.

``list`` asks every broker for the transactional ids it coordinates; ``describe`` asks one
id's coordinator for its producer, state, timeout and the partitions of its ongoing
transaction.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from raftka.client.transaction_admin import TransactionAdmin
from raftka.command import output
from raftka.command.data_args import add_broker_options, broker_addresses
from raftka.command.tls_args import client_sasl, client_tls

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    transactions = commands.add_parser("transactions", help="list and describe transactions")
    actions = transactions.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list", help="every transactional id, its coordinator, producer id and state"
    )
    listing.add_argument(
        "--state", action="append", choices=STATES, default=[], help="only in this state; repeatable"
    )
    add_broker_options(listing)
    listing.set_defaults(func=run_list)
    describe = actions.add_parser(
        "describe", help="one transactional id: producer, state, timeout, partitions"
    )
    describe.add_argument("--transactional-id", required=True, metavar="ID")
    add_broker_options(describe)
    describe.set_defaults(func=run_describe)


def run_list(args: argparse.Namespace) -> int:
    listed = _run(args, lambda admin: admin.list_transactions(args.state))
    rows = [
        {
            "transactional_id": t.transactional_id,
            "coordinator": t.coordinator,
            "producer_id": t.producer_id,
            "state": t.state,
        }
        for t in listed
    ]
    if args.output == "json":
        print(output.to_json(rows))
    else:
        print(
            output.table(
                ("TransactionalId", "Coordinator", "ProducerId", "TransactionState"),
                [tuple(r.values()) for r in rows],
            )
        )
    return 0


def run_describe(args: argparse.Namespace) -> int:
    d = _run(args, lambda admin: admin.describe_transaction(args.transactional_id))
    started = d.start_time_ms if d.start_time_ms >= 0 else None
    view = {
        "coordinator_id": d.coordinator,
        "transactional_id": d.transactional_id,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "state": d.state,
        "timeout_ms": d.timeout_ms,
        "start_time_ms": started,
        "duration_ms": None if started is None else max(0, int(time.time() * 1000) - started),
        "partitions": [f"{topic}-{partition}" for topic, partition in d.partitions],
    }
    if args.output == "json":
        print(output.to_json(view))
        return 0
    headers = (
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    )
    values: list[Any] = list(view.values())
    values[-1] = ",".join(view["partitions"]) or None
    print(output.table(headers, [values]))
    return 0


def _run(args: argparse.Namespace, work):  # noqa: ANN001, ANN202 - an async function of a TransactionAdmin
    async def main() -> Any:
        admin = TransactionAdmin(broker_addresses(args), tls=client_tls(args), sasl=client_sasl(args))
        try:
            return await work(admin)
        finally:
            await admin.close()

    return asyncio.run(main())

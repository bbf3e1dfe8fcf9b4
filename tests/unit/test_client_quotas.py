"""Client quotas without I/O: the sampled rate and its throttle times (Kafka's ``Rate`` and
``ClientQuotaManager`` formulas), which quota applies to a client in Kafka's order of
entities (a property over every shape of entity), the controller's alteration and
description of quotas with what it refuses, and quotas in snapshots."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftka.broker.quota import budgets
from raftka.broker.quota.manager import ClientQuotaManager, ClientQuotas, QuotaWindows
from raftka.broker.quota.rate import SampledRate
from raftka.metadata import quota_ops, quotas
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.image import MetadataImage
from raftka.metadata.quotas import DEFAULT, QuotaEntity
from raftka.metadata.records import RecordError, decode, encode
from raftka.metadata.snapshot import decode_image, encode_image
from raftka.v1 import controller_pb2, metadata_pb2
from tests.unit.metadata_controller_support import log_end, run, single
from tests.unit.test_authorization import call, tls_controller
from tests.unit.tls_support import make_certs

E = controller_pb2.ErrorCode
PRODUCE = quotas.PRODUCER_BYTE_RATE


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s


# the rate ---------------------------------------------------------------------------------


def test_a_burst_on_an_idle_rate_is_spread_over_all_but_one_window() -> None:
    rate = SampledRate(11, 1_000, now_ms=0)
    rate.record(1_000, now_ms=0)
    assert rate.span_ms(0) == 10_000  # Kafka: at least windows_num - 1 whole windows
    assert rate.rate(0) == pytest.approx(100.0)


def test_the_rate_forgets_what_is_older_than_all_its_windows() -> None:
    rate = SampledRate(3, 1_000, now_ms=0)
    rate.record(3_000, now_ms=0)
    rate.record(600, now_ms=2_500)
    assert rate.rate(2_500) == pytest.approx(3_600 / 2.5)
    # at 3 s the first window has expired: 600 B since 2.5 s, over at least two windows
    assert rate.rate(3_000) == pytest.approx(600 / 2.5)


def test_the_throttle_time_is_kafkas_formula_and_capped() -> None:
    clock = Clock()
    client_quotas = {QuotaEntity(None, "greedy"): {PRODUCE: 100.0}}
    manager = ClientQuotaManager("Produce", PRODUCE, QuotaWindows(11, 1), lambda: client_quotas, clock=clock)
    assert manager.record("ANONYMOUS", "greedy", 1_000) == 0  # 1000 B / 10 s = 100 B/s: at the quota
    # 2000 B over 10 s is 200 B/s: (200 - 100) / 100 * 10 s
    assert manager.record("ANONYMOUS", "greedy", 1_000) == 10_000
    assert manager.record("ANONYMOUS", "greedy", 100_000) == 11_000  # at most the whole span
    assert manager.record("ANONYMOUS", "other", 100_000) == 0  # no quota for that client id


def test_the_request_quota_counts_loop_ms_as_percent_and_throttles_at_most_one_window() -> None:
    clock = Clock()
    client_quotas = {QuotaEntity("alice", None): {quotas.REQUEST_PERCENTAGE: 10.0}}
    manager = ClientQuotas(lambda: client_quotas, QuotaWindows(11, 1), clock).request
    assert manager.record("alice", "any", 1_000) == 0  # 1 s of loop over 10 s: 10%
    assert manager.record("alice", "any", 1_000) == 1_000  # 20%: (20-10)/10 * 10 s, capped at one window


def test_a_greedy_client_that_waits_its_throttles_converges_on_its_quota() -> None:
    """Simulated time: the client sends a 10 KiB request whenever it is not throttled, and
    waits out every throttle it is given. Over 60 windows its bytes are near the quota."""
    clock = Clock()
    quota = 50_000.0
    client_quotas = {QuotaEntity(None, "greedy"): {PRODUCE: quota}}
    manager = ClientQuotaManager("Produce", PRODUCE, QuotaWindows(11, 1), lambda: client_quotas, clock=clock)
    start, sent = clock.now_s, 0
    while clock.now_s - start < 60:
        throttle_ms = manager.record("ANONYMOUS", "greedy", 10_240)
        sent += 10_240
        clock.now_s += 0.001 + throttle_ms / 1000  # 1 ms a request, then the throttle
    assert sent / (clock.now_s - start) == pytest.approx(quota, rel=0.25)


def test_budgets_are_bounded_whatever_client_ids_a_client_invents() -> None:
    manager = ClientQuotas(dict, clock=Clock()).produce
    for i in range(budgets.PER_USER_MAX + 20):
        manager.record("ANONYMOUS", f"client-{i}", 1)
    kept = [bucket for bucket, _ in manager.budgets()]
    assert kept == [("", f"client-{i}") for i in range(20, budgets.PER_USER_MAX + 20)]  # its own, LRU
    for user in range(budgets.TOTAL_MAX // budgets.PER_USER_MAX + 2):
        for i in range(budgets.PER_USER_MAX):
            manager.record(f"user-{user}", f"u{user}-{i}", 1)
    assert len(list(manager.budgets())) == budgets.TOTAL_MAX


def test_invented_client_ids_never_reset_a_throttled_clients_budget() -> None:
    """Issue 29 finding 13: 10,000 invented (user, client id) pairs evicted a throttled
    client's budget (least recently used first), and it came back empty. Budgets are
    bounded per user, and one no quota bounds never evicts one a quota bounds: neither
    another user's unbounded client ids nor one's bounded ones (a default client-id quota
    makes a budget per client id) take the throttled client's."""
    clock = Clock()
    client_quotas = {
        QuotaEntity("victim", None): {PRODUCE: 100.0},
        QuotaEntity(None, DEFAULT): {PRODUCE: 1_000_000.0},
    }
    manager = ClientQuotaManager("Produce", PRODUCE, QuotaWindows(11, 1), lambda: client_quotas, clock=clock)
    assert manager.record("victim", "app", 10_000) > 0
    for i in range(2 * budgets.TOTAL_MAX):  # bounded: each its own budget of the client default
        manager.record("mallory", f"invented-{i}", 1)
    client_quotas.pop(QuotaEntity(None, DEFAULT))
    for i in range(2 * budgets.TOTAL_MAX):  # no quota at all
        manager.record(f"user-{i % 50}", f"free-{i}", 1)
    assert manager.record("victim", "app", 1) > 0, "the throttled budget was kept"


# which quota applies ------------------------------------------------------------------------

USERS = ("alice", "bob")
CLIENTS = ("app", "tool")
NAMES_OF = {"user": (*USERS, DEFAULT, None), "client": (*CLIENTS, DEFAULT, None)}
entities = st.builds(
    QuotaEntity, st.sampled_from(NAMES_OF["user"]), st.sampled_from(NAMES_OF["client"])
).filter(lambda e: e.user is not None or e.client_id is not None)

# Kafka's documented precedence (docs: "Quotas" / "the order of precedence"), literally
KAFKA_ORDER = (
    ("/config/users/<user>/clients/<client-id>", lambda u, c: QuotaEntity(u, c), "both"),
    ("/config/users/<user>/clients/<default>", lambda u, c: QuotaEntity(u, DEFAULT), "both"),
    ("/config/users/<user>", lambda u, c: QuotaEntity(u, None), "user"),
    ("/config/users/<default>/clients/<client-id>", lambda u, c: QuotaEntity(DEFAULT, c), "both"),
    ("/config/users/<default>/clients/<default>", lambda u, c: QuotaEntity(DEFAULT, DEFAULT), "both"),
    ("/config/users/<default>", lambda u, c: QuotaEntity(DEFAULT, None), "user"),
    ("/config/clients/<client-id>", lambda u, c: QuotaEntity(None, c), "client"),
    ("/config/clients/<default>", lambda u, c: QuotaEntity(None, DEFAULT), "client"),
)


@given(
    st.dictionaries(entities, st.floats(1, 1e9), max_size=12),
    st.sampled_from(USERS),
    st.sampled_from(CLIENTS),
)
def test_the_first_entity_in_kafkas_order_that_has_the_key_applies(
    set_quotas: dict[QuotaEntity, float], user: str, client_id: str
) -> None:
    image_quotas = {entity: {PRODUCE: value} for entity, value in set_quotas.items()}
    match = quotas.resolve(image_quotas, user, client_id, PRODUCE)
    for _, entity_of, shared_by in KAFKA_ORDER:
        entity = entity_of(user, client_id)
        if entity in set_quotas:
            assert match.value == set_quotas[entity]
            assert (
                match.bucket
                == {
                    "both": (user, client_id),
                    "user": (user, ""),
                    "client": ("", client_id),
                }[shared_by]
            )
            return
    assert match == (quotas.NO_QUOTA, ("", client_id))


def test_each_key_is_resolved_on_its_own() -> None:
    image_quotas = {
        QuotaEntity("alice", None): {PRODUCE: 1.0},
        QuotaEntity(None, DEFAULT): {quotas.CONSUMER_BYTE_RATE: 2.0},
    }
    assert quotas.resolve(image_quotas, "alice", "app", PRODUCE).value == 1.0
    assert quotas.resolve(image_quotas, "alice", "app", quotas.CONSUMER_BYTE_RATE).value == 2.0
    assert quotas.resolve(image_quotas, "alice", "app", quotas.REQUEST_PERCENTAGE).value == math.inf


def test_a_connection_without_a_principal_is_kafkas_anonymous_user() -> None:
    assert quotas.user_of(None) == "ANONYMOUS"
    assert quotas.user_of("User:CN=alice,OU=client,O=raftka") == "CN=alice,OU=client,O=raftka"


# the controller's requests ---------------------------------------------------------------------


def entity(**names: str | None) -> list[metadata_pb2.ClientQuotaEntity]:
    """``user="alice"``, ``client_id=None`` (the default entity)."""
    out = []
    for key, name in names.items():
        component = metadata_pb2.ClientQuotaEntity(entity_type=key.replace("_", "-"))
        if name is not None:
            component.entity_name = name
        out.append(component)
    return out


def alteration(entity_pb: list, **ops: float | None) -> controller_pb2.AlterClientQuotasRequest:
    request = controller_pb2.AlterClientQuotasRequest()
    entry = request.entries.add(entity=entity_pb)
    for key, value in ops.items():
        if value is None:
            entry.ops.add(key=key, remove=True)
        else:
            entry.ops.add(key=key, value=value)
    return request


def applied(image: MetadataImage, request: controller_pb2.AlterClientQuotasRequest) -> MetadataImage:
    plan = quota_ops.alter(image, request)
    assert [e.error for e in plan.response.entries] == [E.NONE] * len(request.entries), plan.response
    delta = MetadataDelta(image)
    for record in plan.records:
        delta.replay(decode(encode(record)))
    return delta.apply(image.offset + len(plan.records))


def test_alter_then_describe_round_trips_and_removal_empties_the_entity() -> None:
    image = applied(
        MetadataImage(), alteration(entity(user="alice"), producer_byte_rate=1024, request_percentage=12.5)
    )
    image = applied(image, alteration(entity(client_id=None), consumer_byte_rate=2048))
    assert image.client_quotas == {
        QuotaEntity("alice", None): {PRODUCE: 1024.0, quotas.REQUEST_PERCENTAGE: 12.5},
        QuotaEntity(None, DEFAULT): {quotas.CONSUMER_BYTE_RATE: 2048.0},
    }
    described = quota_ops.describe(image, controller_pb2.DescribeClientQuotasRequest())
    assert [(list(e.entity), dict(e.values)) for e in described.entries] == [
        (entity(client_id=None), {quotas.CONSUMER_BYTE_RATE: 2048.0}),
        (entity(user="alice"), {PRODUCE: 1024.0, quotas.REQUEST_PERCENTAGE: 12.5}),
    ]
    only_defaults = controller_pb2.DescribeClientQuotasRequest()
    only_defaults.components.add(entity_type="client-id", match_type=quota_ops.MATCH_DEFAULT)
    assert len(quota_ops.describe(image, only_defaults).entries) == 1
    image = applied(image, alteration(entity(user="alice"), producer_byte_rate=None, request_percentage=None))
    assert QuotaEntity("alice", None) not in image.client_quotas


def test_setting_the_same_value_again_writes_nothing() -> None:
    request = alteration(entity(user="alice"), producer_byte_rate=1024)
    image = applied(MetadataImage(), request)
    assert quota_ops.alter(image, request).records == []


@pytest.mark.parametrize(
    ("entity_pb", "ops", "field"),
    [
        (entity(ip="10.0.0.1"), {"producer_byte_rate": 1.0}, "entries[0].entity[0].entity_type"),
        (entity(user=""), {"producer_byte_rate": 1.0}, "entries[0].entity[0].entity_name"),
        ([], {"producer_byte_rate": 1.0}, "entries[0].entity: names no entity type"),
        (
            entity(user="a") + entity(user="b"),
            {"producer_byte_rate": 1.0},
            "entries[0].entity[1].entity_type",
        ),
        (entity(user="alice"), {"producer_byte_rate": -5.0}, "entries[0].ops[0].value"),
        (entity(user="alice"), {"producer_byte_rate": 0.0}, "entries[0].ops[0].value"),
        (entity(user="alice"), {"consumer_byte_rate": 1.5}, "entries[0].ops[0].value"),
        (entity(user="alice"), {"request_percentage": math.nan}, "entries[0].ops[0].value"),
        (entity(user="alice"), {"request_percentage": math.inf}, "entries[0].ops[0].value"),
        (entity(user="alice"), {"controller_mutation_rate": 1.0}, "entries[0].ops[0].key"),
        (entity(user="alice"), {"bogus": None}, "entries[0].ops[0].key"),
    ],
)
def test_a_bad_entity_key_or_value_is_refused_naming_the_field_and_writes_nothing(
    entity_pb: list, ops: dict[str, float | None], field: str
) -> None:
    plan = quota_ops.alter(MetadataImage(), alteration(entity_pb, **ops))
    (result,) = plan.response.entries
    assert result.error == E.INVALID_REQUEST
    assert field in result.message
    assert plan.records == []


def test_one_bad_entry_leaves_the_good_ones_as_kafka_does() -> None:
    request = alteration(entity(user="alice"), producer_byte_rate=1024)
    request.entries.add(entity=entity(user="bob"), ops=[controller_pb2.ClientQuotaOp(key="bogus", value=1)])
    plan = quota_ops.alter(MetadataImage(), request)
    assert [e.error for e in plan.response.entries] == [E.NONE, E.INVALID_REQUEST]
    assert len(plan.records) == 1


def test_a_malformed_quota_record_is_neither_written_nor_replayed() -> None:
    unsorted = metadata_pb2.MetadataRecord(
        client_quota=metadata_pb2.ClientQuotaRecord(
            entity=entity(user="alice", client_id="app"), key=PRODUCE, value=1.0
        )
    )
    with pytest.raises(RecordError, match="not sorted"):
        encode(unsorted)
    negative = metadata_pb2.MetadataRecord(
        client_quota=metadata_pb2.ClientQuotaRecord(entity=entity(user="alice"), key=PRODUCE, value=-1.0)
    )
    with pytest.raises(RecordError, match="ClientQuotaRecord.value"):
        decode(negative.SerializeToString())


def test_snapshots_carry_the_quotas() -> None:
    image = applied(MetadataImage(), alteration(entity(client_id=None, user="alice"), producer_byte_rate=7))
    image = applied(image, alteration(entity(user=None), request_percentage=33.5))
    assert decode_image(encode_image(image)).client_quotas == image.client_quotas


def test_the_active_controller_commits_quotas_and_refuses_a_bad_one_without_appending() -> None:
    async def body() -> None:
        quorum, member = await single()
        controller = member.controller
        answer = await controller.alter_client_quotas(
            alteration(entity(user="alice"), producer_byte_rate=4096)
        )
        assert answer.status.error == E.NONE and answer.entries[0].error == E.NONE
        assert member.image.client_quotas == {QuotaEntity("alice", None): {PRODUCE: 4096.0}}
        before = log_end(member)
        refused = await controller.alter_client_quotas(alteration(entity(user="bob"), producer_byte_rate=-1))
        assert refused.entries[0].error == E.INVALID_REQUEST
        assert log_end(member) == before
        described = await controller.describe_client_quotas(controller_pb2.DescribeClientQuotasRequest())
        assert [dict(e.values) for e in described.entries] == [{PRODUCE: 4096.0}]
        await quorum.close()

    run(body)


def test_with_tls_only_who_may_alter_the_clusters_configs_sets_quotas(tmp_path: Path) -> None:
    """Kafka's rule: AlterClientQuotas needs ALTER_CONFIGS on the cluster."""
    certs = make_certs(tmp_path / "certs")

    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (started, address):
            request = alteration(entity(user="alice"), producer_byte_rate=1024)
            refused = await call(address, certs.alice, "AlterClientQuotas", request)
            assert refused.status.error == E.CLUSTER_AUTHORIZATION_FAILED
            assert started.state_machine.image.client_quotas == {}
            allowed = await call(address, certs.admin, "AlterClientQuotas", request)
            assert allowed.status.error == E.NONE and allowed.entries[0].error == E.NONE
            assert started.state_machine.image.client_quotas == {
                QuotaEntity("alice", None): {PRODUCE: 1024.0}
            }

    run(body)

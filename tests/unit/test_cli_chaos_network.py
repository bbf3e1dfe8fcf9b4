"""chaos partition-broker and lossy-broker without a network: when the cluster counts as having reacted to
each partition, and the refusals before anything is cut (nodes outside namespaces, a
negative hold). The partitions themselves run in tests/integration/test_network_partitions.py."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from raftka.cli import cluster
from raftka.cli.main import main
from raftka.client.types import PartitionInfo
from raftka.command import local
from raftka.command.errors import CliError
from raftka.tools.chaos import netns
from raftka.tools.chaos.chaos_network import _REACTIONS

VICTIM = 101


def partition(leader: int, isr: tuple[int, ...]) -> PartitionInfo:
    return PartitionInfo(0, leader, 1, 1, (101, 102, 103), isr)


@pytest.mark.parametrize(
    ("partitions", "isolated"),
    [
        ([partition(VICTIM, (101,)), partition(102, (102, 103))], True),
        ([partition(VICTIM, (101, 102)), partition(102, (102, 103))], False),  # still replicates to 102
        ([partition(VICTIM, (101,)), partition(102, (101, 102))], False),  # still follows 102
    ],
)
def test_cut_off_its_followers_means_it_shares_no_isr(
    partitions: list[PartitionInfo], isolated: bool
) -> None:
    reacted = _REACTIONS["followers"](VICTIM)
    assert reacted is not None and reacted(partitions) is isolated


@pytest.mark.parametrize(
    ("partitions", "moved"),
    [
        ([partition(102, (102, 103)), partition(103, (103,))], True),
        ([partition(102, (102,)), partition(-1, ())], False),  # one has no leader yet
        ([partition(102, (102,)), partition(VICTIM, (101,))], False),
    ],
)
def test_cut_off_the_controllers_means_every_partition_led_elsewhere(
    partitions: list[PartitionInfo], moved: bool
) -> None:
    reacted = _REACTIONS["controller"](VICTIM)
    assert reacted is not None and reacted(partitions) is moved


def test_cut_off_the_clients_is_nothing_the_cluster_sees() -> None:
    assert _REACTIONS["clients"](VICTIM) is None


def test_a_cluster_outside_network_namespaces_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the tools: on a machine without iptables too, what to change is the cluster."""
    cluster.create(tmp_path, 1, brokers=3)
    monkeypatch.setattr(netns, "missing_tools", lambda: ["iptables"])
    with pytest.raises(SystemExit, match="1"):
        main(["chaos", "partition-broker", "--from", "followers", "--dir", str(tmp_path)])
    assert "node(s) [1, 101, 102, 103]" in capsys.readouterr().err
    assert all(node.pid is None for node in local.load(tmp_path).nodes)


def test_a_cluster_in_namespaces_without_iptables_is_refused_naming_the_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tools are checked once the nodes are known to be in namespaces, whatever the
    machine has installed."""
    cluster.create(tmp_path, 1, brokers=3, netns={n: f"ns{n}" for n in (1, 101, 102, 103)})
    monkeypatch.setattr(netns, "missing_tools", lambda: ["iptables"])
    with pytest.raises(SystemExit, match="1"):
        main(["chaos", "partition-broker", "--from", "followers", "--dir", str(tmp_path)])
    assert "partition-broker needs iptables: apt-get install -y iptables" in capsys.readouterr().err
    assert all(node.pid is None for node in local.load(tmp_path).nodes)


def test_a_negative_hold_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="1"):
        main(["chaos", "partition-broker", "--from", "clients", "--hold-s", "-1", "--dir", str(tmp_path)])
    assert "--hold-s: expected 0 or more, got -1.0" in capsys.readouterr().err


@pytest.mark.parametrize("percent", ["0", "100", "-5"])
def test_a_loss_outside_0_to_100_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], percent: str
) -> None:
    with pytest.raises(SystemExit, match="1"):
        main(["chaos", "lossy-broker", "--loss-percent", percent, "--dir", str(tmp_path)])
    assert (
        f"--loss-percent: expected more than 0 and less than 100, got {float(percent):g}"
        in capsys.readouterr().err
    )


def test_a_heal_returns_once_the_delay_proxies_are_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL is not death: on a loaded machine a proxy is still listed a while after it."""
    listings = iter([[4242], [4242], [4242], []])  # the first listing, then twice still there
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(netns, "in_namespace", lambda *argv: None)
    monkeypatch.setattr(netns, "delay_proxies", lambda namespace: next(listings))
    monkeypatch.setattr(netns.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    netns.heal("ns101")
    assert killed == [(4242, signal.SIGKILL)]
    assert next(listings, "drained") == "drained"


def test_a_delay_proxy_that_outlives_its_sigkill_fails_the_heal_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(netns, "PROXY_EXIT_TIMEOUT_S", 0.05)
    monkeypatch.setattr(netns, "in_namespace", lambda *argv: None)
    monkeypatch.setattr(netns, "delay_proxies", lambda namespace: [4242])
    monkeypatch.setattr(netns.os, "kill", lambda pid, sig: None)
    with pytest.raises(CliError, match=r"delay proxies \[4242\] in ns101 still run 0.05 s after SIGKILL"):
        netns.heal("ns101")

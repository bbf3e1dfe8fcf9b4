"""What a restarted broker tells the controller about its data: its log directory's id
(KIP-858), the same after a crash and new once the directory is wiped, and the
partitions it is eligible for whose folder it did not find at start."""

from __future__ import annotations

import shutil
from pathlib import Path

from raftka.broker.log.config import LogConfig
from raftka.broker.log.manager import LogManager
from raftka.broker.wiped_replicas import wiped
from raftka.metadata.image import EMPTY
from tests.unit import metadata_support as m


def test_the_directory_id_outlives_a_crash_and_not_a_wiped_directory(tmp_path: Path) -> None:
    directory = tmp_path / "partitions"
    first = LogManager(directory)
    first.open_all()
    first.get_or_create("t", 0, m.topic_id(1), LogConfig())  # then killed: no close, no marker
    assert len(first.directory_id) == 16

    crashed = LogManager(directory)
    crashed.open_all()
    assert crashed.directory_id == first.directory_id
    assert crashed.clean_shutdown_epoch is None and crashed.found_at_start == {"t-0"}

    shutil.rmtree(directory)
    wiped_disk = LogManager(directory)
    wiped_disk.open_all()
    assert wiped_disk.directory_id != first.directory_id and not wiped_disk.found_at_start


def test_a_partition_is_wiped_where_the_image_has_the_broker_eligible_and_no_folder_was_found() -> None:
    t1, t2 = m.topic_id(1), m.topic_id(2)
    in_elr = m.partition(t1, 1, [1, 2, 3], isr=[2], leader=2)
    in_elr.partition.elr.append(1)
    image = m.replay(
        EMPTY,
        *(m.register(b, b, fenced=False) for b in (1, 2, 3)),
        m.topic("a", t1),
        m.topic("b", t2),
        m.partition(t1, 0, [1, 2, 3], isr=[1, 2, 3], leader=1),  # in the ISR, folder found
        in_elr,  # in the ELR, no folder
        m.partition(t1, 2, [1, 2, 3], isr=[2, 3], leader=2),  # neither: nothing to vouch for
        m.partition(t2, 0, [1, 2], isr=[1, 2], leader=2),  # in the ISR, no folder
    )
    assert sorted(wiped(image, 1, {"a-0"})) == [(t1, 1), (t2, 0)]
    assert list(wiped(image, 1, {"a-0", "a-1", "b-0"})) == []

"""The partitions whose folder was wiped while this broker was down, for the controller.

A broker that crashed keeps its log directory and its id (``raftka.broker.log.directory_id``),
so the controller keeps it in its eligible leader replicas: its logs hold what they held
up to their last flush. One partition's folder may still be gone (deleted by hand, lost
to a fault, the deletion of a partition that was not removed). The broker knows it: the
image names it in the partition's ISR or ELR, so the partition's committed records were
on it, and yet there was no folder at start. Its heartbeats list those partitions until
it is first unfenced (``BrokerHeartbeatRequest.wiped_replicas``); the controller takes it
out of their ISR and ELR as it unfences it and elects it for none of them: it catches up
as any new follower.

Why a folder found at start can be trusted: the broker creates none before the image
holds it unfenced (``raftka.broker.partitions``), and the batch that unfences it is the
one that takes it out of the partitions listed. A crash before that batch commits finds
the same folders missing at the next start, and lists them again.
"""

from __future__ import annotations

from collections.abc import Container, Iterator

from raftka.broker.log.folder_names import partition_folder
from raftka.metadata.image import MetadataImage


def wiped(
    image: MetadataImage, broker_id: int, found_at_start: Container[str]
) -> Iterator[tuple[bytes, int]]:
    """(topic id, partition) of each partition ``image`` has ``broker_id`` eligible for
    (ISR or ELR) whose folder was not among those ``found_at_start``."""
    for topic_id, topic in image.topics_by_id.items():
        for partition, state in topic.partitions.items():
            eligible = broker_id in state.isr or broker_id in state.elr
            if eligible and partition_folder(topic.name, partition) not in found_at_start:
                yield topic_id, partition

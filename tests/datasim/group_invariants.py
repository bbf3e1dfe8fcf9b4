"""What must hold for the consumer group, whatever the faults (a group's safety does not
depend on the replication budget: its state is in the controller's log).

- A partition is never owned by two members of one generation: every assignment a
  member hears in SyncGroup is collected per generation, as the members saw them.
- A member's commit is written only from the group's coordinator at its current
  registration (broker epoch), and only for a generation not older than the one the
  controller recorded last: a commit from a stale generation or a non-coordinator is
  never written. Checked on every batch the controller takes, against its image then.
- Committed offsets never go backwards across generations: the first commit a newer
  generation writes for a partition is not below the offset committed there, since its
  owner started from that offset (a commit from outside the group, a reset, has no
  generation and may go anywhere). Within one generation the partition has one owner,
  and what it commits is its own business.
"""

from __future__ import annotations

from raftka.metadata.group_placement import group_coordinator
from raftka.metadata.image import MetadataImage
from raftka.v1 import controller_pb2
from tests.datasim.invariants import InvariantViolation

E = controller_pb2.ErrorCode


class GroupInvariants:
    def __init__(self) -> None:
        self.owners: dict[int, dict[int, tuple[str, str]]] = {}  # generation -> partition -> (member, name)
        self.commits = 0  # member commits written
        self._generations: dict[tuple[str, int], int] = {}  # (group, partition) -> generation written last

    def assigned(self, generation: int, member_id: str, name: str, partitions: list[int]) -> None:
        owners = self.owners.setdefault(generation, {})
        for partition in partitions:
            owner = owners.setdefault(partition, (member_id, name))
            if owner[0] != member_id:
                raise InvariantViolation(
                    f"partition {partition} is owned by two members of generation {generation}: "
                    f"{owner[1]} ({owner[0]}) and {name} ({member_id})"
                )

    def commits_written(
        self,
        image: MetadataImage,
        request: controller_pb2.CommitGroupOffsetsRequest,
        response: controller_pb2.CommitGroupOffsetsResponse,
    ) -> None:
        """The controller answered ``request`` with ``response`` on ``image``: what it wrote
        must have come from the coordinator, in a current generation, and not go backwards."""
        if response.status.error != E.NONE:
            return
        broker = image.brokers.get(request.broker_id)
        for commit, answer in zip(request.groups, response.groups, strict=True):
            written = [(r.topic, r.partition) for r in answer.partitions if r.error == E.NONE]
            if answer.status.error != E.NONE or not written:
                continue
            who = f"b{request.broker_id} (epoch {request.broker_epoch})"
            coordinator = group_coordinator(image, commit.group)
            if broker is None or broker.epoch != request.broker_epoch or coordinator != request.broker_id:
                raise InvariantViolation(
                    f"a commit to group {commit.group!r} from {who} was written, but the group's "
                    f"coordinator is b{coordinator} and b{request.broker_id}'s registration "
                    f"{'is gone' if broker is None else f'is at epoch {broker.epoch}'}"
                )
            if not commit.HasField("generation_id") or commit.generation_id < 0:
                continue  # from outside the group: a reset
            recorded = image.groups.get(commit.group)
            if recorded is not None and commit.generation_id < recorded.generation_id:
                raise InvariantViolation(
                    f"a commit of generation {commit.generation_id} to group {commit.group!r} from {who} "
                    f"was written, but the controller had recorded generation {recorded.generation_id}"
                )
            self._not_backwards(image, commit, set(written))
            self.commits += 1

    def _not_backwards(
        self, image: MetadataImage, commit: controller_pb2.OffsetCommitRequest, written: set[tuple[str, int]]
    ) -> None:
        committed = image.offsets.get(commit.group, {})
        for topic in commit.topics:
            topic_id = image.topic_ids_by_name[topic.topic]
            for entry in topic.partitions:
                if (topic.topic, entry.partition) not in written:
                    continue
                key = (commit.group, entry.partition)
                last = self._generations.get(key, -1)
                before = committed.get((topic_id, entry.partition))
                if commit.generation_id > last and before is not None and entry.offset < before.offset:
                    raise InvariantViolation(
                        f"group {commit.group!r} generation {commit.generation_id} committed partition "
                        f"{entry.partition} at {entry.offset}, below the {before.offset} committed there "
                        f"before (last in generation {last}): its owner did not start from the committed offset"
                    )
                self._generations[key] = max(last, commit.generation_id)

"""The cleaner's key map (Kafka's SkimpyOffsetMap): key -> the last offset it was written
at, over the dirty part of a log, in a fixed budget of bytes.

A key is kept as its 16-byte MD5 digest beside an 8-byte offset: 24 bytes an entry, in two
flat buffers sized once from the budget, with open addressing (Kafka's probe: successive
4-byte windows of the digest, then linear). A ``dict`` of digests to offsets costs about
five times as much per entry (measured in the tests: a 16-byte ``bytes`` object, an
``int`` and the dict's slot), so the budget would not bound memory. Like Kafka's, the map
is filled only to ``LOAD_FACTOR`` of its slots, so a probe ends quickly; two keys with the
same digest are one key (MD5 collisions between record keys are left to chance, as Kafka
leaves them).
"""

from __future__ import annotations

import hashlib
from array import array

DIGEST_BYTES = 16
OFFSET_BYTES = 8
ENTRY_BYTES = DIGEST_BYTES + OFFSET_BYTES
EMPTY = -1
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor default


class OffsetMap:
    def __init__(self, memory_bytes: int) -> None:
        self.slots = memory_bytes // ENTRY_BYTES
        if self.slots < 1:
            raise ValueError(f"dedupe buffer of {memory_bytes} bytes holds no entry of {ENTRY_BYTES}")
        self.capacity = max(1, int(self.slots * LOAD_FACTOR))  # entries before it counts as full
        self._digests = bytearray(self.slots * DIGEST_BYTES)
        self._offsets = array("q", [EMPTY]) * self.slots
        self.size = 0
        self.latest_offset = -1  # the largest offset put

    def clear(self) -> None:
        self._offsets = array("q", [EMPTY]) * self.slots
        self.size = 0
        self.latest_offset = -1

    @property
    def full(self) -> bool:
        return self.size >= self.capacity

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    def put(self, key: bytes, offset: int) -> None:
        digest = hashlib.md5(key, usedforsecurity=False).digest()
        slot = self._find(digest)
        if self._offsets[slot] == EMPTY:
            if self.size >= self.slots:
                raise OverflowError("offset map has no free slot")
            self.size += 1
            at = slot * DIGEST_BYTES
            self._digests[at : at + DIGEST_BYTES] = digest
        self._offsets[slot] = offset
        self.latest_offset = max(self.latest_offset, offset)

    def get(self, key: bytes) -> int:
        """The last offset put for ``key``; -1 when it was not put."""
        digest = hashlib.md5(key, usedforsecurity=False).digest()
        return self._offsets[self._find(digest)]

    def _find(self, digest: bytes) -> int:
        """The slot holding ``digest``, or the empty slot where it would go."""
        offsets, digests, slots = self._offsets, self._digests, self.slots
        for attempt in range(DIGEST_BYTES - 3):
            slot = int.from_bytes(digest[attempt : attempt + 4], "big") % slots
            if offsets[slot] == EMPTY or digests[slot * DIGEST_BYTES : (slot + 1) * DIGEST_BYTES] == digest:
                return slot
        slot = int.from_bytes(digest[-4:], "big") % slots
        for _ in range(slots):
            slot = (slot + 1) % slots
            if offsets[slot] == EMPTY or digests[slot * DIGEST_BYTES : (slot + 1) * DIGEST_BYTES] == digest:
                return slot
        raise OverflowError("offset map has no free slot")

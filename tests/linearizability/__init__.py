"""A linearizability checker for histories recorded against the real cluster.

``checker.check(model, operations)`` answers whether some order of the operations,
consistent with real time, is a legal sequential run of ``model`` (Wing & Gong's search
with Lowe's memoization, as in Porcupine and Knossos). Histories are split per key
first (P-compositionality), so one topic name or one committed-offset slot is searched
at a time. ``models`` holds the topic and offset models; ``history`` records operations.
"""

"""Deterministic whole-cluster simulation of the real RaftCore (VOPR / RaftEventSimulationTest style).

One seed drives everything: the fault profile, the network, the disks, the clients and
each core's own ``random.Random``. A run has a safety phase (faults on for a bounded
simulated time, invariants checked after every event), then a liveness phase (network
healed, nodes restarted, faults off: a leader must commit new records that reach every
live node within a bound).

Modules, one job each:

- ``scheduler``: the event heap, ordered by (simulated time, sequence);
- ``network``: RPC calls with delays, loss, duplication, partitions and clogs;
- ``disk``: fsync queue, crashes that lose or tear the write in flight, wipes;
- ``statemachine``: applies committed records, snapshots, restores;
- ``node``: drives one core (events in, ``Ready`` out) and checks its driver contract;
- ``invariants``: the safety properties; ``faults``: the seed's profile and the nemesis;
- ``client``, ``cluster``, ``runner``, ``trace``; ``mutants``/``fake_core`` for self-tests.

Run ``python -m tests.simulation --seeds 1000 --jobs 2``; replay a failure with
``python -m tests.simulation --seed N --trace``.
"""

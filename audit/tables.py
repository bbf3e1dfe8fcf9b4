"""The audit's tables, from the canonical rows and the replay's events, with Spark SQL.

Ordered questions (how long was a partition offline, how long did a leader last) are
window functions over the events the replay wrote in log order (``seq``), partitioned
by the thing they are about; nothing here re-derives what a record means.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from raftka.audit.commits import STALL_COMMITS
from raftka.audit.event_tables import CONDITIONS
from raftka.audit.replay import BROKER, GROUP, REBALANCE, STATE, TOPIC_EVENT, TRANSITION

FLAP_WINDOW_MS = 60_000  # fenced again this soon after an unfence: a flap


def _duration(start: str, end: Column) -> Column:
    return end - F.col(start)


def per_epoch(chunks: DataFrame) -> DataFrame:
    """The replay chunks' counts per epoch (``raftka.audit.counts.EPOCH_SCHEMA``) added up:
    an epoch's first and last offset and time, and its records, whichever chunks it spans."""
    return chunks.groupBy("epoch").agg(
        F.min("start_offset").alias("start_offset"),
        F.max("end_offset").alias("end_offset"),
        F.min("first_ms").alias("first_ms"),
        F.max("last_ms").alias("last_ms"),
        F.sum("records").alias("records"),
    )


def controller_epochs(
    per_epoch: DataFrame, opened: DataFrame, uncommitted: DataFrame, end_ms: int
) -> DataFrame:
    """One row per epoch: its leader, offsets and times, tenure, the leaderless gap before it
    and the elections between it and the previous committed epoch that never won.
    ``per_epoch``: offsets, times and records per epoch; ``opened``: the LeaderChange records
    (``raftka.audit.counts``)."""
    order = Window.orderBy("epoch")
    epochs = (
        per_epoch.join(opened, "epoch", "left")
        .withColumn("start_ms", F.coalesce("start_ms", "first_ms"))
        .withColumn("previous_epoch", F.lag("epoch").over(order))
        .withColumn("previous_last_ms", F.lag("last_ms").over(order))
        .withColumn("next_start_ms", F.lead("start_ms").over(order))
        .select(
            "epoch",
            "leader",
            "voters",
            "start_offset",
            "end_offset",
            "start_ms",
            F.col("last_ms").alias("end_ms"),
            # from its LeaderChange to the last batch it wrote (the history's end for the last epoch)
            _duration(
                "start_ms", F.when(F.col("next_start_ms").isNull(), F.lit(end_ms)).otherwise(F.col("last_ms"))
            ).alias("tenure_ms"),
            _duration("previous_last_ms", F.col("start_ms")).alias("gap_before_ms"),
            (F.col("epoch") - F.col("previous_epoch") - 1).alias("failed_elections_before"),
            "records",
            F.lit(True).alias("committed"),
        )
    )
    lost = uncommitted.select(
        "epoch", "leader", F.lit(None).cast("array<int>").alias("voters"), F.col("offset").alias("start_offset"),
        F.col("offset").alias("end_offset"), F.col("timestamp_ms").alias("start_ms"),
        F.col("timestamp_ms").alias("end_ms"), F.lit(0).cast("long").alias("tenure_ms"),
        F.lit(None).cast("long").alias("gap_before_ms"), F.lit(None).cast("int").alias("failed_elections_before"),
        F.lit(1).cast("long").alias("records"), F.lit(False).alias("committed"),
    )  # fmt: skip
    return epochs.unionByName(lost).orderBy("epoch", F.desc("committed"))


def partition_intervals(events: DataFrame, end_ms: int) -> DataFrame:
    """Gaps and islands: each run of state samples with a condition true is one interval,
    ending at the first sample after it (open at the end of the history). The four
    conditions travel as the bits of one mask, so one lag finds where each run starts and
    one running sum per bit numbers the runs, all over the same ordered window."""
    samples = events.filter(F.col("event").isin(TRANSITION, STATE)).select(
        "seq", "offset", "timestamp_ms", "topic", "topic_id", "partition", "min_isr",
        sum((F.coalesce(F.col(c), F.lit(False)).cast("int") * _bit(c)) for c in CONDITIONS).alias("mask"),
    )  # fmt: skip
    per_partition = Window.partitionBy("topic_id", "partition").orderBy("seq")
    running = per_partition.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    samples = samples.select(
        "*",
        F.lead("timestamp_ms").over(per_partition).alias("next_ms"),
        F.lead("offset").over(per_partition).alias("next_offset"),
        F.col("mask")
        .bitwiseAND(F.bitwise_not(F.coalesce(F.lag("mask").over(per_partition), F.lit(0))))
        .alias("started"),
    )
    samples = samples.select(
        "*",
        *[F.sum(_has(F.col("started"), c).cast("int")).over(running).alias(f"run_{c}") for c in CONDITIONS],
    )
    states = F.explode(
        F.array(*[
            F.struct(F.lit(c).alias("condition"), _has(F.col("mask"), c).alias("flag"), F.col(f"run_{c}").alias("run"))
            for c in CONDITIONS
        ])
    )  # fmt: skip
    return (
        samples.select(
            "offset",
            "timestamp_ms",
            "topic",
            "topic_id",
            "partition",
            "min_isr",
            "next_ms",
            "next_offset",
            states.alias("state"),
        )  # fmt: skip
        .filter(F.col("state.flag"))
        .groupBy(
            F.col("state.condition").alias("condition"),
            "topic_id",
            "partition",
            F.col("state.run").alias("run"),
        )
        .agg(
            F.first("topic").alias("topic"),
            F.min("offset").alias("start_offset"),
            F.min("timestamp_ms").alias("start_ms"),
            F.max("next_offset").alias("end_offset"),
            F.max("next_ms").alias("next_ms"),
            # the run reaches the partition's last sample: still true at the history's end
            F.max(F.col("next_ms").isNull()).alias("open"),
            F.max("min_isr").alias("min_isr"),
        )
        .select(
            "condition",
            "topic",
            "topic_id",
            "partition",
            "start_offset",
            "start_ms",
            F.when(~F.col("open"), F.col("end_offset")).alias("end_offset"),
            F.when(F.col("open"), F.lit(end_ms)).otherwise(F.col("next_ms")).alias("end_ms"),
            "open",
            "min_isr",
        )
        .withColumn("duration_ms", F.col("end_ms") - F.col("start_ms"))
    )


def _bit(condition: str) -> int:
    return 1 << CONDITIONS.index(condition)


def _has(mask: Column, condition: str) -> Column:
    return mask.bitwiseAND(_bit(condition)) != 0


def broker_timeline(events: DataFrame, end_ms: int) -> DataFrame:
    """One row per broker state a registration, fence or unfence began, with how long it lasted."""
    brokers = events.filter(F.col("event") == BROKER)
    order = Window.partitionBy("broker").orderBy("seq")
    incarnation = Window.partitionBy("broker", "broker_epoch").orderBy("seq")
    registered_ms = F.first(
        F.when(F.col("cause").isin("REGISTER", "REREGISTER", "SNAPSHOT"), F.col("timestamp_ms")),
        ignorenulls=True,
    )
    state = (
        F.when(F.col("cause") == "UNREGISTER", "UNREGISTERED")
        .when(F.col("fenced"), "FENCED")
        .otherwise("UNFENCED")
    )
    return (
        brokers.withColumn("end_ms", F.coalesce(F.lead("timestamp_ms").over(order), F.lit(end_ms)))
        .withColumn("previous_cause", F.lag("cause").over(order))
        .withColumn("previous_ms", F.lag("timestamp_ms").over(order))
        .withColumn("registered_ms", registered_ms.over(incarnation))
        .select(
            "broker",
            "broker_epoch",
            "incarnation",
            state.alias("state"),
            F.col("cause").alias("started_by"),
            F.col("offset").alias("start_offset"),
            F.col("timestamp_ms").alias("start_ms"),
            "end_ms",
            (F.col("end_ms") - F.col("timestamp_ms")).alias("duration_ms"),
            (F.col("cause") == "REREGISTER").alias("restart"),
            F.when(F.col("cause") == "UNFENCE", F.col("timestamp_ms") - F.col("registered_ms")).alias("register_to_unfence_ms"),
            F.when(F.col("cause").isin("FENCE", "REREGISTER"), F.col("partitions_led")).alias("partitions_led_when_fenced"),
            (
                (F.col("cause") == "FENCE")
                & (F.col("previous_cause") == "UNFENCE")
                & (F.col("timestamp_ms") - F.col("previous_ms") < FLAP_WINDOW_MS)
            ).alias("flap"),
        )
    )  # fmt: skip


def topic_lifecycle(events: DataFrame, end_ms: int) -> DataFrame:
    topics = events.filter(F.col("event") == TOPIC_EVENT)
    created = topics.filter(F.col("cause").isin("CREATE", "SNAPSHOT")).select(
        "topic_id", "topic", F.col("offset").alias("created_offset"), F.col("timestamp_ms").alias("created_ms"),
        (F.col("cause") == "SNAPSHOT").alias("created_before_history"),
    )  # fmt: skip
    deleted = topics.filter(F.col("cause") == "DELETE").select(
        "topic_id", F.col("offset").alias("deleted_offset"), F.col("timestamp_ms").alias("deleted_ms")
    )
    shapes = (
        events.filter(F.col("event").isin(TRANSITION, STATE) & F.col("replicas_after").isNotNull())
        .groupBy("topic_id")
        .agg(
            F.countDistinct("partition").alias("partitions"),
            F.max(F.size("replicas_after")).alias("replication_factor"),
        )
    )
    by_name = Window.partitionBy("topic").orderBy("created_offset")
    return (
        created.join(deleted, "topic_id", "left")
        .join(shapes, "topic_id", "left")
        .withColumn("name_generation", F.row_number().over(by_name))
        .withColumn("name_reused", F.count("*").over(Window.partitionBy("topic")) > 1)
        .withColumn("lifetime_ms", F.coalesce("deleted_ms", F.lit(end_ms)) - F.col("created_ms"))
        .orderBy("created_offset")
    )


def group_offsets(series: DataFrame, events: DataFrame, topics: DataFrame) -> DataFrame:
    """Burrow's evaluation without lag, per group and partition: commits, rewinds (an offset
    lower than the one before), stalls (commits that did not move it), gaps between commits;
    ``series`` holds them, folded by the replay (``raftka.audit.commits``). Ordered by
    group, topic name and partition, then by when each series began: a name reused for a
    new topic (a new topic id) gives one key several series, and the order stays total."""
    expired = (
        events.filter(F.col("event") == GROUP)
        .groupBy(F.col("resource").alias("group"))
        .agg(F.max("timestamp_ms").alias("expired_ms"))
    )
    names = topics.groupBy("topic_id").agg(F.last("topic").alias("topic"))
    status = (
        F.when(F.col("expired_ms").isNotNull() & (F.col("expired_ms") > F.col("last_ms")), "EXPIRED")
        .when((F.col("commits") >= STALL_COMMITS) & (F.col("recent_moves") == 0), "STALLED")
        .when(F.col("rewinds") > 0, "REWOUND")
        .otherwise("OK")
    )
    return (
        series.join(names, "topic_id", "left")
        .join(expired, "group", "left")
        .withColumn("status", status)
        .drop("recent_moves")
        .orderBy("group", "topic", "partition", "first_ms", "topic_id")
    )


def group_rebalances(events: DataFrame) -> DataFrame:
    """Every completed rebalance of every group (GroupRebalanceRecord), with the time since
    the group's previous one: the rebalance history a coordinator records."""
    order = Window.partitionBy("group").orderBy("offset")
    return (
        events.filter(F.col("event") == REBALANCE)
        .select(
            F.col("resource").alias("group"), "generation", "offset", "epoch", "timestamp_ms", "protocol",
            F.col("group_leader").alias("leader"), "members", F.size("members").alias("member_count"),
            F.col("count").alias("assigned_partitions"), F.col("broker").alias("coordinator"),
        )
        .withColumn("since_previous_ms", F.col("timestamp_ms") - F.lag("timestamp_ms").over(order))
        .orderBy("group", "offset")
    )  # fmt: skip


def leadership_by_broker(events: DataFrame, end_ms: int) -> DataFrame:
    """Per broker: elections won (clean or not), leaderships lost, ISR removals, and
    partition-time led. Each sample adds its share to the brokers it names (the leader
    after it, the leader it removed, the replicas it took out of the ISR), so one pass
    and one aggregation make the table."""
    order = Window.partitionBy("topic_id", "partition").orderBy("seq")
    samples = events.filter(F.col("event").isin(TRANSITION, STATE)).withColumn(
        "until_ms", F.coalesce(F.lead("timestamp_ms").over(order), F.lit(end_ms))
    )
    transition = F.col("event") == TRANSITION
    election = transition & (F.col("cause") == "election")
    shares = F.concat(
        F.array(
            F.when(F.col("leader_after") >= 0, _share(
                F.col("leader_after"), led=F.col("until_ms") - F.col("timestamp_ms"), won=election,
                unclean=election & ~F.col("clean"),
            )),
            F.when(transition & (F.col("leader_before") >= 0) & F.col("cause").isin("election", "offline"),
                   _share(F.col("leader_before"), lost=F.lit(True))),
        ),
        F.when(transition & F.col("isr_change").isNotNull(), F.transform(
            F.array_except("isr_before", "isr_after"), lambda broker: _share(broker, removed=F.lit(True))
        )).otherwise(F.array()),
    )  # fmt: skip
    share = F.explode(shares).alias("share")
    return (
        samples.select(share)
        .filter(F.col("share").isNotNull())
        .groupBy(F.col("share.broker").alias("broker"))
        .agg(
            F.sum("share.led").alias("partition_ms_led"),
            F.count_if("share.won").alias("elections_won"),
            F.count_if("share.unclean").alias("unclean_elections_won"),
            F.count_if("share.lost").alias("leaderships_lost"),
            F.count_if("share.removed").alias("isr_removals"),
        )
        .orderBy("broker")
    )


def _share(broker: Column, led: Any = 0, **counted: Any) -> Column:
    """What one sample adds to one broker's row of ``leadership_by_broker``: partition-time
    ``led`` and the events ``counted`` (won, unclean, lost, removed: true or false)."""
    flags = {name: counted.get(name, False) for name in ("won", "unclean", "lost", "removed")}
    return F.struct(
        broker.alias("broker"),
        F.lit(led).cast("long").alias("led")
        if not isinstance(led, Column)
        else led.cast("long").alias("led"),
        *[(v if isinstance(v, Column) else F.lit(v)).alias(name) for name, v in flags.items()],
    )

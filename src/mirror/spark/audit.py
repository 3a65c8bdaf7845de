"""`mirror audit`: a Spark batch job comparing a flow's source and target, per partition.

Both sides are read with Spark's Kafka source (read_committed, headers). The window is what
the mirror had committed: the source up to the flow's group offsets, the target's copies of
exactly those records (by their provenance header), so records still in flight are not
called missing. Per partition: counts and an order-independent checksum (the sum of
xxhash64 over key, value, timestamp and the headers without this hop's provenance one),
also per minute of event time; with provenance headers on, an exact join on the origin
offset lists missing, extra (injected, or a second copy) and altered records, first few of
each with offsets. With provenance headers off there is no origin to join on: the target's
window ends at the copy of the group's committed offset, translated with the flow's offset
map (the same ledger `failover` uses), and the partitions are compared by their counts and
checksums, in total and per minute.

Target retention: records at the start of a source partition whose copies the target no
longer holds (the target's log start moved past them) are `trimmed`, not missing, when the
target topic's retention explains it: they are older than its `retention.ms`, or it has a
`retention.bytes`. They are left out of every comparison and reported as a count. Records
gone from the target's start that its retention does not explain (newer than retention.ms,
no retention.bytes: removed by hand, `kafka-delete-records`) are missing, a difference.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from mirror.config import Config, FlowConfig
from mirror.domain.gaps import SourceGap
from mirror.domain.offsetmap import OffsetSync, translate
from mirror.domain.route import HEADER_ORIGIN, route
from mirror.domain.topics import match_topics
from mirror.errors import UsageError
from mirror.kafka import Admin
from mirror.spark.clients import java_kafka_options
from mirror.store import open_store

SAMPLE = 5  # offsets listed per kind of difference


@dataclass
class PartitionAudit:
    source_topic: str
    target_topic: str
    partition: int
    source_count: int = 0
    target_count: int = 0
    checksum_equal: bool = True
    minutes_differing: int = 0
    missing: list[int] = field(default_factory=list)  # source offsets with no copy
    extra: list[int] = field(
        default_factory=list
    )  # target offsets that copy nothing in the window, or copy a record twice
    altered: list[int] = field(default_factory=list)  # source offsets whose copy differs
    trimmed: int = 0  # source records the target's retention removed (not a difference)
    # Source records the source lost before the mirror copied them (recorded source gaps
    # below the window's end): never mirrored, reported apart, not a difference.
    skipped: int = 0
    skipped_ranges: list[tuple[int, int]] = field(default_factory=list)  # (first, last) source offsets

    @property
    def equal(self) -> bool:
        return (
            self.source_count == self.target_count
            and self.checksum_equal
            and not (self.missing or self.extra or self.altered)
            and not self.minutes_differing
        )


@dataclass
class AuditReport:
    flow: str
    partitions: list[PartitionAudit]

    @property
    def equal(self) -> bool:
        return all(p.equal for p in self.partitions)

    def to_json(self) -> str:
        return json.dumps(
            {
                "flow": self.flow,
                "equal": self.equal,
                "partitions": [{**asdict(p), "equal": p.equal} for p in self.partitions],
            },
            indent=2,
        )


def _read(
    spark: Any, config: Config, cluster: str, starting: dict[str, dict[str, int]], ending: dict[str, dict[str, int]]
) -> Any:
    reader = spark.read.format("kafka")
    for k, v in java_kafka_options(cluster, config.clusters[cluster].client).items():
        reader = reader.option(f"kafka.{k}", v)
    return (
        reader.option("kafka.bootstrap.servers", config.clusters[cluster].bootstrap)
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", ",".join(sorted(starting)))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "false")
        .load()
    )


def retention_cutoff(configs: dict[str, str], now_ms: int) -> float | None:
    """The event time before which the target topic's retention may have removed records
    (None: it keeps everything; +inf: size-based retention may remove any record)."""
    if int(configs.get("retention.bytes", "-1")) >= 0:
        return float("inf")
    ms = int(configs.get("retention.ms", "-1"))
    return None if ms < 0 else float(now_ms - ms)


def first_held(syncs: list[OffsetSync], target_low: int, source_start: int) -> int:
    """The source offset whose copy is the target partition's first record (`target_low`),
    from the offset map: records before it are gone from the target."""
    if target_low <= 0 or not syncs:
        return source_start
    below = [s for s in syncs if s.target_offset <= target_low]
    anchor = below[-1] if below else syncs[0]
    return max(source_start, anchor.source_offset + (target_low - anchor.target_offset))


@dataclass
class _Window:
    """What the audit compares, decided from the clusters' offsets before Spark reads anything."""

    parts: list[tuple[Any, int]]  # (mapping, partition)
    to_target: dict[str, str]  # source topic -> target topic
    start: dict[tuple[str, int], int]  # source partition -> the window's first offset
    end: dict[tuple[str, int], int]  # source partition -> the group's committed offset
    tgt_start: dict[tuple[str, int], int]  # target partition -> log start
    tgt_end: dict[tuple[str, int], int]  # target partition -> high watermark
    cutoffs: dict[str, float | None]  # target topic -> `retention_cutoff`
    copies_end: dict[tuple[str, int], int] = field(default_factory=dict)  # without provenance: the target's window end
    held_from: dict[tuple[str, int], int] = field(
        default_factory=dict
    )  # the first source offset the target still holds
    gaps: dict[tuple[str, int], list[SourceGap]] = field(default_factory=dict)  # recorded source gaps


def audit(
    spark: Any,
    config: Config,
    flow: FlowConfig,
    topics: list[str] | None = None,
    *,
    from_ms: int | None = None,
    to_ms: int | None = None,
    now_ms: int | None = None,
) -> AuditReport:
    """Compare the flow's source and target (see the module's docstring). Each side is read
    from Kafka once and kept (persisted) for the several aggregations and the join."""
    window = _window(config, flow, topics, int(time.time() * 1000) if now_ms is None else now_ms)
    report = AuditReport(flow.name, [PartitionAudit(m.source, m.target, p) for m, p in window.parts])
    if not window.parts:
        return report
    for a in report.partitions:
        key = (a.source_topic, a.partition)
        gaps = [g for g in window.gaps.get(key, []) if g.first < window.end[key]]
        a.skipped, a.skipped_ranges = sum(g.count for g in gaps), [(g.first, g.last) for g in gaps]
    src, tgt = _sides(spark, config, flow, window)
    try:
        _compare(flow, window, report, src, tgt, from_ms, to_ms)
    finally:
        src.unpersist()
        tgt.unpersist()
    return report


def _window(config: Config, flow: FlowConfig, topics: list[str] | None, now: int) -> _Window:
    """The partitions audited and each one's window: from the source's log start to the
    group's committed offset, and the target's range that holds their copies."""
    source_admin = Admin(flow.source, config.clusters[flow.source])
    target_admin = Admin(flow.target, config.clusters[flow.target])
    mappings = match_topics(config, flow, source_admin.topics())
    if topics:
        unknown = sorted(set(topics) - {m.source for m in mappings})
        if unknown:
            raise UsageError(f"--topic {unknown[0]!r} is not a topic flow {flow.name!r} mirrors")
        mappings = [m for m in mappings if m.source in topics]
    existing = target_admin.topics()
    mappings = [m for m in mappings if m.target in existing]
    parts = [(m, p) for m in mappings for p in range(m.partitions)]
    to_target = {m.source: m.target for m in mappings}
    if not parts:
        return _Window(parts, to_target, {}, {}, {}, {}, {})
    committed = source_admin.group_offsets(flow.group_id)
    src_marks = source_admin.watermarks([(m.source, p) for m, p in parts], committed_only=True)
    tgt_marks = target_admin.watermarks([(m.target, p) for m, p in parts], committed_only=False)
    start = {(m.source, p): src_marks[(m.source, p)].low for m, p in parts}
    end = {tp: max(low, committed.get(tp, low)) for tp, low in start.items()}
    retention = target_admin.effective_configs(sorted(set(to_target.values())), ("retention.ms", "retention.bytes"))
    window = _Window(
        parts,
        to_target,
        start,
        end,
        {(m.target, p): tgt_marks[(m.target, p)].low for m, p in parts},
        {(m.target, p): tgt_marks[(m.target, p)].high for m, p in parts},
        {t: retention_cutoff(retention.get(t, {}), now) for t in set(to_target.values())},
    )
    store = open_store(config.offset_store)
    try:
        window.gaps = store.gaps(flow.name)
        if flow.provenance_headers:
            return window
        # Without provenance: the target's window (its copies of [start, end)) from the offset map.
        for m, p in parts:
            syncs = store.syncs(flow.name, m.source, p)
            low, high = window.tgt_start[(m.target, p)], window.tgt_end[(m.target, p)]
            window.copies_end[(m.source, p)] = translate(
                syncs, end[(m.source, p)], high, tip=store.tip(flow.name, m.source, p), target_start=low
            ).target_offset
            window.held_from[(m.source, p)] = first_held(syncs, low, start[(m.source, p)])
    finally:
        store.close()
    return window


def _spec(keys: dict[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in keys.items():
        out.setdefault(t, {})[str(p)] = o
    return out


def _map(pairs: dict[Any, Any]) -> Any:
    """A Spark map literal; tuple keys become "topic|partition"."""
    from pyspark.sql import functions as F

    return F.create_map(
        *[x for k, v in pairs.items() for x in (F.lit("|".join(map(str, k)) if isinstance(k, tuple) else k), F.lit(v))]
    )


def _sides(spark: Any, config: Config, flow: FlowConfig, window: _Window) -> tuple[Any, Any]:
    """Both sides read once and persisted, with what every comparison needs: the digest `h`,
    and on the target whether a record is this flow's copy (`is_copy`, `src_offset`) and
    inside the window (`in_window`)."""
    from pyspark.sql import functions as F

    ts = F.expr("unix_millis(timestamp)")
    src = _read(spark, config, flow.source, _spec(window.start), _spec(window.end))
    src = src.select("topic", "partition", "offset", ts.alias("ts"), "key", "value", "headers")
    tgt = _read(spark, config, flow.target, _spec(window.tgt_start), _spec(window.tgt_end))
    origin = F.expr(
        f"try_element_at(filter(coalesce(headers, array()), h -> h.key = '{HEADER_ORIGIN}'), -1).value"
    ).cast("string")
    tgt = tgt.select("topic", "partition", "offset", ts.alias("ts"), "key", "value", "headers", origin.alias("origin"))
    # Only copies made by this flow, of this partition, count as copies; this hop's header is not content.
    prefix = {
        (r.target_topic, r.partition): (r.origin or b"").decode()
        for m, p in window.parts
        for r in [route(flow, m.source, p)]
    }
    tgt = tgt.withColumn("prefix", _map(prefix)[F.concat_ws("|", "topic", F.col("partition").cast("string"))])
    tgt = tgt.withColumn(
        "is_copy",
        F.coalesce(
            F.col("origin").isNotNull() & (F.col("prefix") != F.lit("")) & F.col("origin").startswith(F.col("prefix")),
            F.lit(False),
        ),
    )
    tgt = tgt.withColumn(
        "src_offset", F.when(F.col("is_copy"), F.expr("try_cast(substring(origin, length(prefix) + 1) as bigint)"))
    )
    tgt = tgt.withColumn(
        "headers",
        F.expr(
            f"filter(coalesce(headers, array()), h -> NOT (h.key = '{HEADER_ORIGIN}' AND cast(h.value as string) <=> "
            "origin AND is_copy))"
        ),
    )
    src = src.withColumn("headers", F.expr("coalesce(headers, array())"))
    digest = F.xxhash64("key", "value", "ts", "headers").cast("decimal(38,0)")
    src = src.withColumn("h", digest)
    tgt = tgt.withColumn("h", digest)
    # The target side of the window: copies of records the group had committed past.
    tgt = tgt.withColumn("source_topic", _map({t: s for s, t in window.to_target.items()})[F.col("topic")])
    key = F.concat_ws("|", "source_topic", F.col("partition").cast("string"))
    if flow.provenance_headers:
        in_window = (
            F.col("is_copy")
            & (F.col("src_offset") >= _map(window.start)[key])
            & (F.col("src_offset") < _map(window.end)[key])
        )
    else:
        in_window = F.col("offset") < _map(window.copies_end)[key]
    tgt = tgt.withColumn("in_window", F.coalesce(in_window, F.lit(False)))
    # Without these, each aggregation below and the join would read the topics from Kafka again.
    # Only what the comparisons use is kept (the digest stands for key, value and headers).
    return src.drop("key", "value", "headers").cache(), tgt.drop("key", "value", "headers", "origin", "prefix").cache()


def _compare(
    flow: FlowConfig, window: _Window, report: AuditReport, src: Any, tgt: Any, from_ms: int | None, to_ms: int | None
) -> None:
    """Counts and checksums per partition and per minute, then (with provenance) the join."""
    from pyspark.sql import functions as F

    held_from = dict(window.held_from)
    if flow.provenance_headers:
        # The first copy the target still holds, where its log start moved (retention): among
        # all its copies, before --from/--to, or a gap after copies it still holds whose
        # records fall in the time range would pass for trimmed.
        moved = [(m.source, p) for m, p in window.parts if window.tgt_start[(m.target, p)] > 0]
        firsts = {
            (r[0], r[1]): r[2]
            for r in tgt.where("in_window").groupBy("source_topic", "partition").agg(F.min("src_offset")).collect()
        }
        held_from = {tp: firsts.get(tp, window.end[tp]) for tp in moved}
    if from_ms is not None:
        src, tgt = src.where(F.col("ts") >= from_ms), tgt.where(F.col("ts") >= from_ms)
    if to_ms is not None:
        src, tgt = src.where(F.col("ts") < to_ms), tgt.where(F.col("ts") < to_ms)
    src, trimmed = _trim(src, window, held_from)
    window_tgt = tgt.where("in_window")

    def agg(df: Any, topic_col: str) -> dict[tuple[str, int], tuple[int, int]]:
        rows = df.groupBy(topic_col, "partition").agg(F.count("*").alias("n"), F.sum("h").alias("s")).collect()
        return {(r[0], r[1]): (r["n"], int(r["s"] or 0)) for r in rows}

    def minutes(df: Any, topic_col: str) -> set[tuple[str, int, int, int, int]]:
        rows = (
            df.groupBy(topic_col, "partition", F.floor(F.col("ts") / 60000).alias("m"))
            .agg(F.count("*").alias("n"), F.sum("h").alias("s"))
            .collect()
        )
        return {(r[0], r[1], r["m"], r["n"], int(r["s"] or 0)) for r in rows}

    src_agg, tgt_agg = agg(src, "topic"), agg(window_tgt, "source_topic")
    src_min, tgt_min = minutes(src, "topic"), minutes(window_tgt, "source_topic")
    by_key = {(a.source_topic, a.partition): a for a in report.partitions}
    for k, a in by_key.items():
        n_s, s_s = src_agg.get(k, (0, 0))
        n_t, s_t = tgt_agg.get(k, (0, 0))
        a.source_count, a.target_count, a.checksum_equal = n_s, n_t, s_s == s_t
        a.trimmed = trimmed.get(k, 0)
        a.minutes_differing = len({(m[2]) for m in src_min ^ tgt_min if (m[0], m[1]) == k})
    if flow.provenance_headers:
        _join(src, tgt, window_tgt, by_key)


def _trim(src: Any, window: _Window, held_from: dict[tuple[str, int], int]) -> tuple[Any, dict[tuple[str, int], int]]:
    """Source records before the first one the target holds, older than its retention:
    trimmed (counted, and left out of every comparison)."""
    from pyspark.sql import functions as F

    rules = [
        (F.col("topic") == F.lit(t))
        & (F.col("partition") == F.lit(p))
        & (F.col("offset") < F.lit(f))
        & (F.col("ts") < F.lit(window.cutoffs[window.to_target[t]]))
        for (t, p), f in held_from.items()
        if f > window.start[(t, p)] and window.cutoffs.get(window.to_target[t]) is not None
    ]
    if not rules:
        return src, {}
    rule = rules[0]
    for more in rules[1:]:
        rule = rule | more
    src = src.withColumn("trimmed", F.coalesce(rule, F.lit(False)))
    trimmed = {(r[0], r[1]): r[2] for r in src.where("trimmed").groupBy("topic", "partition").count().collect()}
    return src.where("NOT trimmed").drop("trimmed"), trimmed


def _join(src: Any, tgt: Any, window_tgt: Any, by_key: dict[tuple[str, int], PartitionAudit]) -> None:
    """With provenance: missing, altered, twice-copied and foreign records, by origin offset."""
    from pyspark.sql import functions as F

    def first_few(df: Any, topic: str, part: str, col: str) -> list[Any]:
        return df.groupBy(topic, part).agg(F.slice(F.sort_array(F.collect_list(col)), 1, SAMPLE).alias("o")).collect()

    s = src.select(
        F.col("topic").alias("st"), F.col("partition").alias("sp"), F.col("offset").alias("so"), F.col("h").alias("sh")
    )
    t = window_tgt.select(
        F.col("source_topic").alias("st"),
        F.col("partition").alias("sp"),
        F.col("src_offset").alias("so"),
        F.col("h").alias("th"),
        F.col("offset").alias("to"),
    )
    joined = s.join(t, ["st", "sp", "so"], "full_outer")
    missing = first_few(joined.where("to IS NULL"), "st", "sp", "so")
    altered = first_few(joined.where("sh IS NOT NULL AND th IS NOT NULL AND sh != th"), "st", "sp", "so")
    dupes = first_few(
        t.groupBy("st", "sp", "so").agg(F.count("*").alias("n"), F.max("to").alias("to")).where("n > 1"),
        "st",
        "sp",
        "to",
    )
    # Records on the target that are no copy of this flow's (injected), within the target
    # range the window's copies span.
    foreign = first_few(tgt.where("NOT is_copy"), "source_topic", "partition", "offset")
    for rows, attr in ((missing, "missing"), (altered, "altered"), (dupes, "extra"), (foreign, "extra")):
        for r in rows:
            hit = by_key.get((r[0], r[1]))
            if hit is not None:
                setattr(hit, attr, sorted([*getattr(hit, attr), *r["o"]])[:SAMPLE])

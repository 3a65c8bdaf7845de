"""When a flow's durable Spark checkpoint may be resumed: only where it agrees with the group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirror.config import Config, load
from mirror.errors import ExitCode, MirrorError
from mirror.spark import checkpoint
from mirror.spark.checkpoint import claim_checkpoint, default_checkpoint, resume_problem


def write_batch(location: Path, batch: int, ends: dict[str, dict[str, int]], *, committed: bool) -> None:
    """One batch as Spark's offset log and commit log record it."""
    (location / "offsets").mkdir(parents=True, exist_ok=True)
    (location / "commits").mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000, "conf": {}}
    (location / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(ends)}")
    if committed:
        (location / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def group(**parts: int) -> dict[str, dict[str, int]]:
    return {"t": {p.removeprefix("p"): o for p, o in parts.items()}}


def test_nothing_to_resume_is_no_problem(tmp_path):
    assert resume_problem(tmp_path / "query", group(p0=5)) is None
    (tmp_path / "query" / "offsets").mkdir(parents=True)
    (tmp_path / "query" / "offsets" / ".0.tmp").write_text("half written")
    assert resume_problem(tmp_path / "query", group(p0=5)) is None


def test_a_completed_batch_resumes_only_where_the_group_is(tmp_path):
    q = tmp_path / "query"
    write_batch(q, 0, group(p0=100, p1=50), committed=True)
    write_batch(q, 1, group(p0=200, p1=80), committed=True)
    assert resume_problem(q, group(p0=200, p1=80)) is None
    assert "t[1] (60) is outside the checkpoint's 80..80" in (
        resume_problem(q, group(p0=200, p1=60)) or ""
    )  # rewound by an operator
    assert "outside" in (resume_problem(q, group(p0=300, p1=80)) or "")  # moved on by `mirror run` meanwhile


def test_an_unfinished_batch_resumes_while_the_group_is_within_it(tmp_path):
    """The driver died mid-batch: Spark plans batch 1 again from batch 0's end; the group may
    already hold part of batch 1 (tasks produced, rows stored, then the group committed)."""
    q = tmp_path / "query"
    write_batch(q, 0, group(p0=100, p1=50), committed=True)
    write_batch(q, 1, group(p0=200, p1=80), committed=False)
    assert resume_problem(q, group(p0=100, p1=50)) is None
    assert resume_problem(q, group(p0=150, p1=80)) is None
    assert "outside" in (resume_problem(q, group(p0=99, p1=50)) or "")


def test_an_unfinished_first_batch_or_other_partitions_are_not_resumed(tmp_path):
    q = tmp_path / "query"
    write_batch(q, 0, group(p0=100), committed=False)
    assert "first batch (0) never completed" in (resume_problem(q, group(p0=0)) or "")
    write_batch(q, 0, group(p0=100), committed=True)
    assert "other partitions" in (resume_problem(q, group(p0=100, p1=0)) or "")
    assert "(-2) is outside" in (
        resume_problem(q, {"t": {"0": -2}}) or ""
    )  # the group has no offset: from the beginning


def test_an_unreadable_offset_log_is_not_resumed(tmp_path):
    q = tmp_path / "query"
    (q / "offsets").mkdir(parents=True)
    (q / "offsets" / "3").write_text("garbage")
    assert "unreadable" in (resume_problem(q, group(p0=1)) or "")


def test_the_default_checkpoint_is_per_flow_beside_the_config_file(tmp_path, monkeypatch):
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "m.yaml"
    body = (
        'clusters: {a: {bootstrap: "x:1"}, b: {bootstrap: "y:1"}}\nflows: '
        "[{name: f, source: a, target: b, topics: {include: [t]}}]\n"
    )
    path.write_text(body)
    monkeypatch.chdir(tmp_path)
    config = load(path)
    assert default_checkpoint(config, config.flow("f")) == tmp_path / "etc" / ".mirror" / "spark" / "f"
    path.write_text(body + "spark: {checkpoint_dir: /var/lib/mirror/spark}\n")
    config = load(path)
    assert default_checkpoint(config, config.flow("f")) == Path("/var/lib/mirror/spark/f")


def write_first_offsets(location: Path, starts: dict[str, dict[str, int]]) -> None:
    """The Kafka source's first offsets of the query, as Spark writes them (a NUL byte first)."""
    (location / "sources" / "0").mkdir(parents=True, exist_ok=True)
    (location / "sources" / "0" / "0").write_text(f"\0v1\n{json.dumps(starts)}")


def test_an_unfinished_first_batch_resumes_from_the_querys_first_offsets(tmp_path):
    """The driver died in the query's first batch: Spark plans batch 0 again from the source's
    first offsets; a partition the group never committed (-2) started at the log start."""
    q = tmp_path / "query"
    write_batch(q, 0, group(p0=100, p1=50), committed=False)
    write_first_offsets(q, group(p0=10, p1=0))
    assert resume_problem(q, {"t": {"0": 10, "1": -2}}) is None
    assert resume_problem(q, group(p0=60, p1=50)) is None  # the batch's commit is the last step
    assert "t[0] (9) is outside the checkpoint's 10..100" in (resume_problem(q, group(p0=9, p1=0)) or "")
    write_batch(q, 0, group(p0=100, p1=50), committed=True)
    assert "t[1] (-2) is outside the checkpoint's 50..50" in (
        resume_problem(q, {"t": {"0": 100, "1": -2}}) or ""
    )  # the group lost what the checkpoint went past
    write_batch(q, 0, group(p0=100, p1=0), committed=True)
    assert resume_problem(q, {"t": {"0": 100, "1": -2}}) is None  # an empty partition never moved


def test_an_unfinished_batch_whose_predecessor_is_gone_is_not_resumed(tmp_path):
    q = tmp_path / "query"
    write_batch(q, 5, group(p0=100), committed=False)
    assert "batch 5 never completed and the batch before it is unreadable" in (resume_problem(q, group(p0=100)) or "")


def _config(tmp_path: Path) -> Config:
    """One flow, f, in a config file under tmp_path."""
    path = tmp_path / "m.yaml"
    path.write_text(
        'clusters: {a: {bootstrap: "x:1"}, b: {bootstrap: "y:1"}}\nflows: '
        "[{name: f, source: a, target: b, topics: {include: [t]}}]\n"
    )
    return load(path)


def test_a_checkpoint_that_cannot_be_created_is_one_error_naming_it(tmp_path):
    """A --checkpoint under a file (or a read-only volume): one line naming the directory,
    exit 1, not a traceback (review-lock D11)."""
    config = _config(tmp_path)
    (tmp_path / "afile").write_text("")
    with pytest.raises(MirrorError) as failed:
        claim_checkpoint(tmp_path / "afile" / "cp", config.flow("f"))
    assert failed.value.exit_code == ExitCode.FAILURE
    assert str(tmp_path / "afile" / "cp") in str(failed.value) and "\n" not in str(failed.value)


def test_a_marker_write_that_fails_halfway_leaves_no_marker_behind(tmp_path, monkeypatch):
    """The volume full as the marker is written: an empty marker left behind would refuse every
    later run as another flow's (exit 2) until removed by hand (review-lock2 E5)."""
    config = _config(tmp_path)

    def full(fd: int) -> None:  # written, but not to the disk: it filled
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint.os, "fsync", full)
    with pytest.raises(MirrorError):
        claim_checkpoint(tmp_path / "cp", config.flow("f"))
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "cp").iterdir()) == []  # no marker, no temporary
    assert claim_checkpoint(tmp_path / "cp", config.flow("f")) == tmp_path / "cp" / "query"


def test_a_marker_write_refused_by_a_read_only_volume_is_still_one_error(tmp_path, monkeypatch):
    """The clean-up of a failed marker write fails too (read-only): still the one error
    (review-today D4)."""
    config = _config(tmp_path)
    (tmp_path / "cp").mkdir()

    def read_only(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(checkpoint.os, "replace", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(MirrorError) as failed:
        claim_checkpoint(tmp_path / "cp", config.flow("f"))
    assert "Read-only file system" in str(failed.value)


def test_an_empty_marker_is_taken_as_no_marker(tmp_path):
    """A marker left empty (a power loss before its data reached the disk) names no flow: the
    directory is claimed again, not refused as another flow's (review-last E4)."""
    config = _config(tmp_path)
    (tmp_path / "cp").mkdir()
    (tmp_path / "cp" / "mirror-flow.json").write_text("")
    assert claim_checkpoint(tmp_path / "cp", config.flow("f")) == tmp_path / "cp" / "query"
    assert json.loads((tmp_path / "cp" / "mirror-flow.json").read_text())["flow"] == "f"

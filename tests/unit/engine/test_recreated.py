"""A source topic re-created while the flow was stopped: told at assignment from the offset
store (the topic's recorded id, its rows and source ends), on a real SQLite store."""

from __future__ import annotations

from pathlib import Path

from mirror.domain.gaps import GapReason, SourceGap, old_unmirrored, recreated_while_stopped
from mirror.domain.offsetmap import OffsetSync
from mirror.engine.recreated import RecreatedTopics
from mirror.run.recorder import OffsetMapRecorder
from mirror.store import SqliteStore

P0, P1 = ("orders", 0), ("orders", 1)


class Heard:
    def __init__(self) -> None:
        self.gaps: list[SourceGap] = []

    def on_gap(self, flow: str, gap: SourceGap) -> None:
        self.gaps.append(gap)


def test_a_topic_is_recreated_only_with_no_committed_offset_and_another_id_or_history_without_one() -> None:
    assert recreated_while_stopped("id-1", "id-2", [None, None], history=False)
    assert not recreated_while_stopped("id-1", "id-1", [None], history=True)  # the same topic, offsets expired
    assert not recreated_while_stopped("id-1", "id-2", [None, 5], history=True)  # the group committed the new one
    assert recreated_while_stopped(None, "id-2", [None], history=True)  # a store from before ids were recorded
    assert not recreated_while_stopped(None, "id-2", [None], history=False)  # a topic never mirrored
    assert not recreated_while_stopped("id-1", None, [None], history=True)  # its id unreadable: no claim


def test_the_old_topics_records_not_copied_run_from_the_newest_copy_to_the_end_the_store_saw() -> None:
    assert old_unmirrored({0: 30, 1: 10}, {0: 19, 1: 9}) == 10
    assert old_unmirrored({0: 30}, {}) == 30  # nothing copied of it: all it held (at most)
    assert old_unmirrored({}, {0: 19}) is None  # no end ever seen: unknown


def _store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "o.db")
    store.write_syncs("f", [OffsetSync("orders", 0, 0, 0)], [OffsetSync("orders", 0, 19, 19)])
    store.write_source_ends("f", {P0: 30}, 1)
    store.record_source_topic_ids("f", {"orders": "id-1"})
    return store


def test_a_topic_with_another_id_and_no_offsets_is_reported_with_what_the_old_one_held(tmp_path: Path, caplog) -> None:
    store, heard = _store(tmp_path), Heard()
    recorder = OffsetMapRecorder(store, "f", registry=None)
    topics = RecreatedTopics.of("f", [recorder, heard])
    assert topics is not None
    assert topics.check({"orders": "id-2"}, [P0, P1], {P0: None, P1: None}, set()) == {"orders"}
    assert heard.gaps == [SourceGap("orders", -1, 0, 9, GapReason.RECREATED)]
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "source topic orders was deleted and created again while the flow was stopped" in caplog.text
    assert "(10 by the offset store's last look)" in caplog.text
    recorder.flush()
    assert store.gaps("f") == {}  # its offsets name nothing in the new topic: no offset_gaps row
    assert store.source_topic_ids("f") == {"orders": "id-2"}  # the next start knows the new one
    # Known now: the next assignment (a rebalance, before any commit) reports nothing again.
    assert topics.check({"orders": "id-2"}, [P0], {P0: None}, set()) == set()
    assert len(heard.gaps) == 1


def test_a_topic_the_group_committed_or_already_found_recreated_is_not_reported(tmp_path: Path) -> None:
    heard = Heard()
    topics = RecreatedTopics(flow="f", store=_store(tmp_path), listeners=[heard])
    assert topics.check({"orders": "id-2"}, [P0], {P0: 7}, set()) == set()
    assert topics.check({"orders": "id-3"}, [P0], {P0: None}, {"orders"}) == set()
    assert heard.gaps == []


def test_offsets_unreadable_decide_and_record_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path)
    topics = RecreatedTopics("f", store, [Heard()])
    assert topics.check({"orders": "id-2"}, [P0], None, set()) == set()
    assert store.source_topic_ids("f") == {"orders": "id-1"}


def test_without_a_recorded_id_the_stores_history_tells_and_the_count_is_unknown_without_ends(
    tmp_path: Path, caplog
) -> None:
    store, heard = SqliteStore(tmp_path / "o.db"), Heard()
    store.write_syncs("f", [OffsetSync("orders", 0, 0, 0)], [OffsetSync("orders", 0, 19, 19)])
    topics = RecreatedTopics("f", store, [heard])
    assert topics.check(
        {"orders": "id-2", "fresh": "id-9"}, [P0, ("fresh", 0)], {P0: None, ("fresh", 0): None}, set()
    ) == {"orders"}
    assert heard.gaps == [SourceGap("orders", -1, 0, -1, GapReason.RECREATED)]
    assert "(how many is unknown)" in caplog.text
    assert store.source_topic_ids("f") == {"orders": "id-2", "fresh": "id-9"}

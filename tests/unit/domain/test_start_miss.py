"""A group positioned before where the copy began (`start_from`): the plan counts the records
the source holds in between as never mirrored (miss), and starts at the first copy."""

from __future__ import annotations

from mirror.domain.offsetmap import OffsetSync, translate


def test_records_before_the_copy_began_are_a_miss() -> None:
    first = OffsetSync("t", 0, 1000, 0)  # the copy began at source offset 1000
    tr = translate([first], 100, 500, 1500, 1500, source_log=(0, 1500))
    assert tr.target_offset == 0
    assert tr.unmirrored == 900  # 100..999: the group never read them and the target never had them


def test_records_the_source_deleted_before_the_group_read_them_are_not_counted() -> None:
    first = OffsetSync("t", 0, 1000, 0)
    tr = translate([first], 100, 500, 1500, 1500, source_log=(400, 1500))
    assert tr.unmirrored == 600  # 400..999 still held by the source

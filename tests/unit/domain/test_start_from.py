"""`start_from` parsing and the start it chooses (pure)."""

from __future__ import annotations

import pytest

from mirror.domain.start_from import StartFrom, chosen_start, start_moment

NOW = 1_795_838_580_000


def test_the_three_forms() -> None:
    assert StartFrom.parse("earliest", NOW) == StartFrom("earliest")
    assert StartFrom.parse("Latest", NOW) == StartFrom("latest")
    assert StartFrom.parse("-6h", NOW).timestamp_ms(NOW) == NOW - 6 * 3_600_000
    assert StartFrom.parse("2026-11-22T04:03:00Z", NOW).timestamp_ms(0) == 1_795_320_180_000
    assert StartFrom.parse("1795838580000", NOW).at_ms == 1_795_838_580_000


def test_the_moment_is_fixed_when_the_flow_starts() -> None:
    started = NOW + 60_000
    assert start_moment(StartFrom.parse("-1h", NOW), started, first=True) == started - 3_600_000
    assert start_moment(StartFrom.parse("-1h", NOW), started, first=False) == started - 3_600_000
    # latest: the end at the first assignment; later (a new topic or partition) the records
    # written since the flow started, not since it noticed them
    assert start_moment(StartFrom("latest"), started, first=True) is None
    assert start_moment(StartFrom("latest"), started, first=False) == started
    assert start_moment(StartFrom("earliest"), started, first=True) is None


@pytest.mark.parametrize("bad", ["yesterday", "-6x", "2999-01-01T00:00:00Z"])
def test_bad_values_name_the_key(bad: str) -> None:
    with pytest.raises(ValueError, match="start_from"):
        StartFrom.parse(bad, NOW)


def test_chosen_start() -> None:
    assert chosen_start(None, 500) == 500  # latest: the end
    assert chosen_start(120, 500) == 120
    assert chosen_start(-1, 500) == 500  # nothing that recent: the end
    assert chosen_start(600, 500) == 500  # past the stable end: wait there

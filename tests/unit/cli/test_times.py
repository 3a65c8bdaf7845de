from __future__ import annotations

import pytest

from mirror.cli.times import format_ms, parse_time
from mirror.errors import ExitCode, UsageError

NOW = 1_795_838_580_000  # 2026-11-27T...


def test_iso_epoch_relative() -> None:
    assert parse_time("2026-11-22T04:03:00Z", NOW) == 1_795_320_180_000
    assert parse_time("2026-11-22T04:03:00+00:00", NOW) == 1_795_320_180_000
    assert parse_time("2026-11-22T05:03:00+01:00", NOW) == 1_795_320_180_000
    assert parse_time("2026-11-22T04:03:00", NOW) == 1_795_320_180_000  # no zone: UTC
    assert parse_time("1795320180000", NOW) == 1_795_320_180_000
    assert parse_time("-15m", NOW) == NOW - 900_000
    assert parse_time("-2h", NOW) == NOW - 7_200_000
    assert parse_time("-30s", NOW) == NOW - 30_000
    assert format_ms(1_795_320_180_000) == "2026-11-22T04:03:00.000Z"


@pytest.mark.parametrize("bad", ["yesterday", "", "15m", "+15m", "2026-13-01T00:00:00Z", "12345"])
def test_unparseable_is_usage_error_naming_at(bad: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_time(bad, NOW)
    assert "--at" in str(info.value) and info.value.exit_code == ExitCode.USAGE


def test_future_is_refused() -> None:
    with pytest.raises(UsageError) as info:
        parse_time(str(NOW + 60_000), NOW)
    assert "--at" in str(info.value) and "future" in str(info.value)

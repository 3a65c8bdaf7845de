"""Small fakes shared by the Spark task tests."""

from __future__ import annotations


class Delivered:
    """A delivery report's message: only its target offset is read."""

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset

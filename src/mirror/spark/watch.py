"""What restarts a running query: the flow's matched topics changed under it.

Spark's source reads the partitions it was given (`assign`) with the offsets it planned:
it notices neither a new matching topic nor a grown one, nor a topic deleted and created
again (a new id, offsets starting over). Each of these restarts the query, whose new start
(`mirror.spark.starts`) then mirrors the new partitions or incarnations from the beginning.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mirror.config import Config, FlowConfig
from mirror.domain.topics import TopicMapping, mirrorable_topics
from mirror.errors import MirrorError

log = logging.getLogger(__name__)


class TopicWatch:
    """Compares a running query's topics with the clusters' (a failed read is no change)."""

    def __init__(self, config: Config, flow: FlowConfig, source: Any, target: Any) -> None:
        self.config = config
        self.flow = flow
        self.source = source
        self.target = target

    def changed(
        self, mappings: list[TopicMapping], source_ids: Mapping[str, str], target_ids: Mapping[str, str]
    ) -> bool:
        """Whether the query over `mappings`, started with these topic ids, must restart."""
        return (
            self.topics_changed(mappings)
            or self.targets_recreated(mappings, target_ids)
            or self.sources_recreated(mappings, source_ids)
        )

    def topics_changed(self, mappings: list[TopicMapping]) -> bool:
        """A topic matched, unmatched, or its partition count changed."""
        try:
            now, _ = mirrorable_topics(self.config, self.flow, self.source.topics())
        except MirrorError as exc:
            log.warning("flow %s: topic refresh failed: %s", self.flow.name, exc)
            return False
        return [(m.source, m.partitions) for m in now] != [(m.source, m.partitions) for m in mappings]

    def sources_recreated(self, mappings: list[TopicMapping], known: Mapping[str, str]) -> bool:
        """A source topic was deleted and created again (a new id) while the query ran:
        restarted, the query mirrors its partitions from the beginning. A deleted one is
        `topics_changed`'s."""
        ids = {m.source: known[m.source] for m in mappings if m.source in known}
        return self._ids_changed("source", self.source, ids, deleted_too=False)

    def targets_recreated(self, mappings: list[TopicMapping], known: Mapping[str, str]) -> bool:
        """A target topic was deleted, or deleted and created again (a new id), while the query
        ran: restarted, the query starts its partitions from the beginning (`new_target`)."""
        ids = {m.target: known[m.target] for m in mappings if m.target in known}
        return self._ids_changed("target", self.target, ids, deleted_too=True)

    def _ids_changed(self, side: str, admin: Any, known: dict[str, str], *, deleted_too: bool) -> bool:
        if not known:
            return False
        try:
            now = admin.topic_ids(sorted(known))
        except MirrorError as exc:
            log.warning("flow %s: %s topic refresh failed: %s", self.flow.name, side, exc)
            return False
        changed = sorted(t for t, i in known.items() if now.get(t) != i and (deleted_too or t in now))
        if changed:
            log.warning(
                "flow %s: %s topics %s were deleted%s created again",
                self.flow.name,
                side,
                ", ".join(changed),
                " or" if deleted_too else " and",
            )
        return bool(changed)

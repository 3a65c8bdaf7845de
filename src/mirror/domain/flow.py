"""What the domain reads of a topology and its flows: protocols, not the YAML config layer.

The domain never imports `mirror.config`, so it stays loadable (and testable) without
pydantic or a YAML file; `mirror.config.Config` and `FlowConfig` satisfy these protocols
structurally, and a unit test may pass any small object with the same attributes.
Read-only properties, so that a model's mutable fields and a frozen dataclass both fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from mirror.domain.naming import RenamePolicy, TopicFilter


class FlowTopics(Protocol):
    @property
    def include(self) -> Sequence[str]: ...


class Flow(Protocol):
    """One flow: a source cluster's matching topics copied to a target cluster."""

    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def rename(self) -> RenamePolicy: ...
    @property
    def topics(self) -> FlowTopics: ...
    @property
    def groups(self) -> Sequence[str]: ...  # consumer groups checkpointed and translated
    @property
    def group_id(self) -> str: ...  # the mirror's own group on the source
    @property
    def provenance_headers(self) -> bool: ...
    @property
    def sync_topic_configs(self) -> bool: ...
    @property
    def sync_topic_deletes(self) -> bool: ...
    @property
    def sync_group_offsets(self) -> bool: ...
    @property
    def sync_acls(self) -> bool: ...
    @property
    def exactly_once(self) -> bool: ...
    @property
    def progress_group(self) -> str: ...  # exactly_once: the target group its transactions commit progress to

    def topic_filter(self, canary_topic: str | None = None) -> TopicFilter: ...


class Canary(Protocol):
    @property
    def topic(self) -> str: ...


class Topology(Protocol):
    """The whole file as far as the domain needs it: cluster names, the flows, the canary topic."""

    @property
    def clusters(self) -> Mapping[str, object]: ...
    @property
    def flows(self) -> Sequence[Flow]: ...
    @property
    def canary(self) -> Canary: ...

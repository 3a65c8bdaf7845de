"""Topic configs: what was set on a topic, its effective values, incremental changes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from mirror.kafka.admin.base import AdminBase


class TopicConfigAdmin(AdminBase):
    """DescribeConfigs and IncrementalAlterConfigs on topics."""

    def topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """Non-default configs of each topic (what a user or the cluster set on purpose)."""
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        if not resources:
            return {}
        out: dict[str, dict[str, str]] = {}
        for res, fut in self._client.describe_configs(resources, request_timeout=self.timeout).items():
            entries = self._result(f"describe configs of {res.name!r}", fut, ("DescribeConfigs", "topic", res.name))
            # Only what was set on the topic itself: broker-wide settings belong to each cluster.
            out[res.name] = {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and e.value is not None}
        return out

    def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], reset: Iterable[str] = ()) -> None:
        """Set some topic configs and return others to the cluster's default, leaving the rest alone.

        Incremental (KIP-339): a plain AlterConfigs would replace the topic's whole config,
        wiping the target operator's own settings (segment sizes, placement).
        """
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_configs.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in reset]
        if not entries:
            return
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        for fut in self._client.incremental_alter_configs([res], request_timeout=self.timeout).values():
            self._result(f"alter the configs of topic {topic!r}", fut, ("AlterConfigs", "topic", topic))

    def effective_configs(self, topics: Iterable[str], names: Iterable[str]) -> dict[str, dict[str, str]]:
        """The effective value (set on the topic, or its broker's default) of each config in
        `names`, per topic; a topic that is gone is left out."""
        wanted = set(names)
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        out: dict[str, dict[str, str]] = {}
        if not resources:
            return out
        for res, fut in self._client.describe_configs(resources, request_timeout=self.timeout).items():
            try:
                entries = self._answer(f"describe configs of {res.name!r}", fut)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                self._result(f"describe configs of {res.name!r}", fut, ("DescribeConfigs", "topic", res.name))  # raises the right error
                continue
            out[res.name] = {k: e.value for k, e in entries.items() if k in wanted and e.value is not None}
        return out

    def max_message_bytes(self, topics: Iterable[str]) -> dict[str, int]:
        """Each topic's effective `max.message.bytes` (set on it, or its broker's default):
        the largest record batch the broker accepts for it."""
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        out: dict[str, int] = {}
        if not resources:
            return out
        for res, fut in self._client.describe_configs(resources, request_timeout=self.timeout).items():
            try:
                entry = self._answer(f"describe configs of {res.name!r}", fut).get("max.message.bytes")
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # deleted, or created a moment ago: not known yet
                self._result(f"describe configs of {res.name!r}", fut, ("DescribeConfigs", "topic", res.name))  # raises the right error
                continue
            if entry is not None and entry.value is not None:
                out[res.name] = int(entry.value)
        return out

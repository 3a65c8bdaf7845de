"""The canary topic on a flow's source: made by `mirror run` at start and by the prober.

Why the mirror makes it too: the mirror subscribes to the topics that exist at a topic
refresh (`refresh_interval`, 30 s by default). If the prober created the canary topic
only after the mirror's first refresh, its first probes would wait for the next one and
look lost. Made before the first refresh, the route exists from the start.
"""

from __future__ import annotations

from mirror.kafka.admin import Admin

# Small, and only recent probes matter: an hour of retention keeps a restarted reader's
# backlog short. One partition per broker, so every broker's path is probed.
TOPIC_CONFIG = {"retention.ms": str(3_600_000)}


def ensure_canary_topic(admin: Admin, topic: str) -> tuple[int, bool]:
    """(partition count, created now) of the canary topic, creating it when missing."""
    count = admin.topics().get(topic)
    if count is not None:
        return count, False
    brokers = max(1, admin.broker_count())
    created = admin.create_topic(topic, brokers, config=TOPIC_CONFIG)
    return admin.topics().get(topic, brokers), created

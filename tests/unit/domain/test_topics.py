"""topic_change: was a target topic deleted, or deleted and created again, since its id was seen?"""

from __future__ import annotations

import pytest

from mirror.domain.topics import TopicChange, topic_change


@pytest.mark.parametrize(
    ("seen", "now", "present", "change"),
    [
        ("id-1", "id-1", True, TopicChange.SAME),
        ("id-1", "id-2", True, TopicChange.RECREATED),  # deleted and created again under the same name
        ("id-1", None, False, TopicChange.GONE),
        # never seen with an id: a topic just created that the cluster does not show yet
        (None, None, False, TopicChange.SAME),
        # there, but not describable yet (its id unknown): nothing to compare, not a re-creation
        ("id-1", None, True, TopicChange.SAME),
        (None, "id-2", True, TopicChange.SAME),
    ],
)
def test_a_topic_is_told_apart_from_an_earlier_one_of_its_name_only_by_its_id(seen, now, present, change):
    assert topic_change(seen, now, present=present) is change

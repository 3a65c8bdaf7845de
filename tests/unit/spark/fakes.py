"""Small fakes shared by the Spark task tests."""

from __future__ import annotations

from mirror.config import parse
from mirror.spark.task import TaskPlan


def task_plan(flow_settings: str = "") -> TaskPlan:
    """The plan of a task of flow `f` (src -> dst, topic `orders`); `flow_settings`: more keys
    of the flow, as YAML flow-mapping entries (`"exactly_once: true, "`)."""
    config = parse(
        f"""\
clusters:
  src: {{bootstrap: 127.0.0.1:9092}}
  dst: {{bootstrap: 127.0.0.1:9093}}
flows:
  - {{name: f, source: src, target: dst, {flow_settings}topics: {{include: [orders]}}}}
""",
        env={},
    )
    return TaskPlan(config.flow("f"), config.clusters["dst"])


class Delivered:
    """A delivery report's message: only its target offset is read."""

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset

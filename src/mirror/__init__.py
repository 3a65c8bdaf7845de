"""mirror: Kafka cross-cluster mirroring and disaster recovery.

A record's journey starts in `mirror.engine.worker` (consume from the source) and ends in the
same module (produce to the target, then commit the source offset). See README.md for
the tour.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"

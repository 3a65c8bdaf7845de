"""What the first timed run would otherwise pay alone: the contenders' jars read from disk.

A JVM contender reads its jars (pyspark's ~300 MB, MirrorMaker 2's) as it starts; the first
one to start after a while reads them from disk, the next finds them in the page cache. So
the jars of every selected JVM contender are read once before the first timed run (the
harness also makes one untimed copy of the bench topic: see `harness._warm_up`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bench import mm2


def jar_files(kinds: Iterable[str]) -> list[Path]:
    """The jars the contenders of these kinds ("spark", "mm2") load, where they can be found."""
    folders: list[Path] = []
    files: list[Path] = []
    kinds = set(kinds)
    if "spark" in kinds:
        import pyspark

        from mirror.spark.jvm import writer_jars

        folders.append(Path(pyspark.__file__).parent / "jars")
        from mirror.errors import MirrorError
        from mirror.spark.job import connector_jars

        try:
            files += [Path(j) for j in connector_jars(pyspark.__version__)]
        except MirrorError:
            pass  # no connector: the Spark rows fail on their own, with the hint
        files += [Path(j) for j in writer_jars()]
    if "mm2" in kinds and mm2.available():
        folders.append(mm2.libs())
    for folder in folders:
        files += sorted(folder.glob("*.jar"))
    return files


def read_files(paths: Iterable[Path], chunk: int = 1 << 20) -> int:
    """Read every file whole (into the page cache); returns the bytes read. Unreadable ones are skipped."""
    total = 0
    for path in paths:
        try:
            with path.open("rb") as f:
                while block := f.read(chunk):
                    total += len(block)
        except OSError:
            continue
    return total

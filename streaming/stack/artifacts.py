"""Maven artifacts for the local stack: the Kafka broker, Spark's Kafka connector and Hadoop's
S3A filesystem (``s3a://`` checkpoints).

All are published only on Maven Central. ``ensure(group)`` runs ``mvn
dependency:copy-dependencies`` on a small pom in ``deploy/local/maven/<group>/`` into a
per-user cache shared by every checkout (``cache_dir()``). A marker file holding the pom's hash
makes a second run, from this checkout or another, download nothing and start no Maven at all;
Maven's own repository in the cache (``m2``) is keyed by coordinates, so a pom that changes
fetches only what is new. The folders of the
jars for Spark's JVM (``SPARK_GROUPS``) hold only what PySpark does not ship already, so that
the whole folder can go on Spark's classpath.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from streaming.cachedir import cache_dir

GROUPS = ("kafka", "spark-kafka", "s3a")
SPARK_GROUPS = ("spark-kafka", "s3a")  # jars for PySpark's JVM
_MARKER = ".complete"
_LAYOUT = b"without-pyspark-jars"  # in the marker: a folder filled unfiltered is filled again


class ArtifactError(RuntimeError):
    """Maven could not provide the jars; the message says what to check."""


def repo_root() -> Path:
    """The checkout this package runs from (connmon is installed editable)."""
    env = os.environ.get("CONNMON_HOME")
    return Path(env) if env else Path(__file__).resolve().parents[2]


def part_dir(out: Path) -> Path:
    """An empty folder beside ``out`` to fill before ``swap_in`` moves it into place."""
    part = out.with_name(f"{out.name}.part-{os.getpid()}")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    return part


def swap_in(part: Path, out: Path) -> None:
    """Replace folder ``out`` by the completed folder ``part`` (beside it) with renames only:
    a reader sees the old folder or the new one, never a half-filled one. When another
    process swapped in first, the first one stays (``part`` is removed either way)."""
    old = out.with_name(f"{out.name}.old-{os.getpid()}")
    if out.exists():
        out.rename(old)
    try:
        part.rename(out)
    except OSError:  # another process renamed its own folder into place meanwhile
        shutil.rmtree(part, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


def pom_path(group: str) -> Path:
    if group not in GROUPS:
        raise ValueError(f"unknown artifact group {group!r}; expected one of {GROUPS}")
    return repo_root() / "deploy" / "local" / "maven" / group / "pom.xml"


def pom_property(group: str, name: str) -> str:
    """A ``<properties>`` value of the group's pom (the pinned version)."""
    text = pom_path(group).read_text()
    m = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", text)
    if not m:
        raise ArtifactError(f"{pom_path(group)} has no <{name}> property")
    return m.group(1).strip()


def _jar_dir(group: str) -> Path:
    return cache_dir() / "jars" / group


def _pom_digest(group: str) -> str:
    text = pom_path(group).read_bytes()
    return hashlib.sha256(text + _LAYOUT if group in SPARK_GROUPS else text).hexdigest()


def is_cached(group: str) -> bool:
    marker = _jar_dir(group) / _MARKER
    return marker.exists() and marker.read_text().strip() == _pom_digest(group)


def ensure(group: str, quiet: bool = False) -> Path:
    """Download the group's jars unless cached; return the folder holding them."""
    out = _jar_dir(group)
    if is_cached(group):
        return out
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ArtifactError("Maven ('mvn') is not on PATH; it is needed once to fetch the jars")
    # filled beside the folder, then swapped in: a checkout using the jars meanwhile never
    # sees a half-filled folder
    part = part_dir(out)
    (cache_dir() / "empty-repo").mkdir(parents=True, exist_ok=True)
    cmd = [
        mvn,
        "-B",
        "-f",
        str(pom_path(group)),
        f"-Dmaven.repo.local={cache_dir() / 'm2'}",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={part}",
    ]
    if quiet:
        cmd.insert(2, "-q")
    else:
        print(f"connmon: fetching {group} jars with Maven (first run only)...", file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=quiet, text=True)
    if proc.returncode != 0:
        shutil.rmtree(part, ignore_errors=True)
        detail = (proc.stdout or "")[-2000:] if quiet else ""
        raise ArtifactError(f"mvn failed for {pom_path(group)} (exit {proc.returncode}){detail}")
    if group in SPARK_GROUPS:
        found = sorted(part.glob("*.jar"))
        for jar in set(found) - set(_without_spark_provided(found)):
            jar.unlink()
    (part / _MARKER).write_text(_pom_digest(group))
    swap_in(part, out)
    return out


def jars(group: str) -> list[Path]:
    """The group's jars (fetched first if needed), sorted for a stable classpath."""
    folder = ensure(group, quiet=True)
    found = sorted(folder.glob("*.jar"))
    if group in SPARK_GROUPS:
        found = _without_spark_provided(found)
    return found


def _artifact_name(jar: Path) -> str:
    """``kafka-clients-3.9.0.jar`` -> ``kafka-clients`` (``_2.13`` is part of the name),
    ``netty-codec-4.1.118.Final.jar`` -> ``netty-codec``, ``zstd-jni-1.5.6-9.jar`` ->
    ``zstd-jni``, ``log4j-1.2-api-2.24.3.jar`` -> ``log4j-1.2-api``."""
    return re.sub(r"-\d+(?:\.\d+)+(?:\.[A-Za-z]\w*)?(?:-\w+)*$", "", jar.stem)


def _classes(jar: Path) -> set[str]:
    with zipfile.ZipFile(jar) as z:
        return {n for n in z.namelist() if n.endswith(".class") and not n.startswith("META-INF/")}


def _without_spark_provided(found: list[Path]) -> list[Path]:
    """Drop jars PySpark already ships (scala, hadoop, slf4j, netty ...): two versions of one
    library on a classpath fail in ways that are hard to read. A jar counts as shipped when
    PySpark has a jar of that name holding any of its classes (``annotations`` of the AWS SDK
    is not JetBrains' ``annotations``)."""
    import pyspark

    shipped: dict[str, list[Path]] = {}
    for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar"):
        shipped.setdefault(_artifact_name(jar), []).append(jar)
    kept = []
    for jar in found:
        same_name = shipped.get(_artifact_name(jar), [])
        if not same_name or not any(_classes(jar) & _classes(other) for other in same_name):
            kept.append(jar)
    return kept


def check_spark_version() -> str:
    """The connector must match the installed PySpark exactly; returns the version."""
    import pyspark

    wanted = pom_property("spark-kafka", "spark.version")
    if pyspark.__version__ != wanted:
        raise ArtifactError(
            f"installed pyspark {pyspark.__version__} does not match spark.version {wanted} in "
            f"{pom_path('spark-kafka')}; pin both to the same version"
        )
    return wanted


def pyspark_hadoop_version() -> str:
    """The version of the Hadoop client PySpark ships (``hadoop-client-api-<version>.jar``)."""
    import pyspark

    folder = Path(pyspark.__file__).parent / "jars"
    for jar in folder.glob("hadoop-client-api-*.jar"):
        m = re.fullmatch(r"hadoop-client-api-(.+)\.jar", jar.name)
        if m:
            return m.group(1)
    raise ArtifactError(f"no hadoop-client-api jar in {folder}")


def check_hadoop_version() -> str:
    """hadoop-aws must have exactly the version of PySpark's Hadoop client; returns it."""
    shipped = pyspark_hadoop_version()
    wanted = pom_property("s3a", "hadoop.version")
    if shipped != wanted:
        raise ArtifactError(
            f"installed pyspark ships Hadoop {shipped}, but hadoop.version is {wanted} in "
            f"{pom_path('s3a')}; set it to {shipped} (and aws-sdk.version to the AWS SDK that "
            "hadoop-aws of that version uses)"
        )
    return wanted


def main() -> int:
    """``python -m streaming.stack.artifacts``: fetch everything (used by the Makefile)."""
    check_hadoop_version()
    for group in GROUPS:
        cached = is_cached(group)
        folder = ensure(group)
        n = len(list(folder.glob("*.jar")))
        print(f"{group}: {n} jars in {folder}{' (cached)' if cached else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Maven artifacts for the local stack: the Kafka broker and Spark's Kafka connector.

Both are published only on Maven Central. ``ensure(group)`` runs ``mvn
dependency:copy-dependencies`` on a small pom in ``deploy/local/maven/<group>/`` into a
git-ignored cache (``deploy/local/.cache``, or ``$CONNMON_CACHE_DIR``). A marker file holding the
pom's hash makes a second run download nothing and start no Maven at all.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

GROUPS = ("kafka", "spark-kafka")
_MARKER = ".complete"


class ArtifactError(RuntimeError):
    """Maven could not provide the jars; the message says what to check."""


def repo_root() -> Path:
    """The checkout this package runs from (connmon is installed editable)."""
    env = os.environ.get("CONNMON_HOME")
    return Path(env) if env else Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    env = os.environ.get("CONNMON_CACHE_DIR")
    return Path(env) if env else repo_root() / "deploy" / "local" / ".cache"


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
    return hashlib.sha256(pom_path(group).read_bytes()).hexdigest()


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
    if out.exists():
        shutil.rmtree(out)
    (cache_dir() / "empty-repo").mkdir(parents=True, exist_ok=True)
    cmd = [
        mvn,
        "-B",
        "-f",
        str(pom_path(group)),
        f"-Dmaven.repo.local={cache_dir() / 'm2'}",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={out}",
    ]
    if quiet:
        cmd.insert(2, "-q")
    else:
        print(f"connmon: fetching {group} jars with Maven (first run only)...", file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=quiet, text=True)
    if proc.returncode != 0:
        detail = (proc.stdout or "")[-2000:] if quiet else ""
        raise ArtifactError(f"mvn failed for {pom_path(group)} (exit {proc.returncode}){detail}")
    (out / _MARKER).write_text(_pom_digest(group))
    return out


def jars(group: str) -> list[Path]:
    """The group's jars (fetched first if needed), sorted for a stable classpath."""
    folder = ensure(group, quiet=True)
    found = sorted(folder.glob("*.jar"))
    if group == "spark-kafka":
        found = _without_spark_provided(found)
    return found


def _artifact_name(jar: Path) -> str:
    """``kafka-clients-3.9.0.jar`` -> ``kafka-clients`` (``_2.13`` is part of the name)."""
    return re.sub(r"-\d+(?:\.\d+)+(?:-\w+)?$", "", jar.stem)


def _without_spark_provided(found: list[Path]) -> list[Path]:
    """Drop jars PySpark already ships (scala, hadoop, slf4j ...): two versions of one library
    on a classpath fail in ways that are hard to read."""
    import pyspark

    shipped = {_artifact_name(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in found if _artifact_name(j) not in shipped]


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


def main() -> int:
    """``python -m streaming.stack.artifacts``: fetch everything (used by the Makefile)."""
    for group in GROUPS:
        cached = is_cached(group)
        folder = ensure(group)
        n = len(list(folder.glob("*.jar")))
        print(f"{group}: {n} jars in {folder}{' (cached)' if cached else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

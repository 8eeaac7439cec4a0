"""Put Spark's Kafka connector (and optionally Hadoop's S3A filesystem) into PySpark's own
``jars`` folder, at image build time.

The connector comes from ``deploy/local/maven/spark-kafka/pom.xml`` through
``streaming.stack.artifacts``, the code that fetches it for the local stack, so the image has
the same versions and the same filter (jars PySpark already ships are left out). Everything in
``$SPARK_HOME/jars`` is on the driver's and the executors' classpath: no ``spark.jars`` needed.

Usage (in the Containerfile's build stage, with Maven and the source tree at $CONNMON_HOME)::

    python install-jars.py [--s3a]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from streaming.stack import artifacts

HERE = Path(__file__).resolve().parent
S3A_POM = HERE / "maven" / "s3a" / "pom.xml"


def spark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def hadoop_version(jars_dir: Path) -> str:
    """The Hadoop client version PySpark ships (hadoop-aws must match it exactly)."""
    for jar in jars_dir.glob("hadoop-client-api-*.jar"):
        m = re.fullmatch(r"hadoop-client-api-(.+)\.jar", jar.name)
        if m:
            return m.group(1)
    raise SystemExit(f"no hadoop-client-api jar in {jars_dir}")


def artifact_name(jar: Path) -> str:
    """``kafka-clients-3.9.0.jar`` -> ``kafka-clients``: the rule ``streaming.stack.artifacts``
    uses to leave out jars PySpark already ships."""
    return re.sub(r"-\d+(?:\.\d+)+(?:-\w+)?$", "", jar.stem)


def s3a_jars(jars_dir: Path, work: Path) -> list[Path]:
    """hadoop-aws for PySpark's Hadoop and its runtime dependencies, minus what PySpark ships."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("mvn is needed for --s3a")
    out = work / "s3a"
    cmd = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(S3A_POM),
        f"-Dhadoop.version={hadoop_version(jars_dir)}",
        f"-Dmaven.repo.local={work / 'm2'}",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={out}",
    ]
    subprocess.run(cmd, check=True)
    shipped = {artifact_name(j) for j in jars_dir.glob("*.jar")}
    return [j for j in sorted(out.glob("*.jar")) if artifact_name(j) not in shipped]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--s3a", action="store_true", help="also hadoop-aws and the AWS SDK")
    args = parser.parse_args(argv)
    version = artifacts.check_spark_version()
    dest = spark_jars_dir()
    found = artifacts.jars("spark-kafka")
    if args.s3a:
        found += s3a_jars(dest, artifacts.cache_dir())
    for jar in found:
        shutil.copy2(jar, dest / jar.name)
        print(f"spark {version}: {jar.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

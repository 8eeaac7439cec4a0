"""Put Spark's Kafka connector (and optionally Hadoop's S3A filesystem) into PySpark's own
``jars`` folder, at image build time.

Both come from the poms of the local stack (``deploy/local/maven/spark-kafka/pom.xml``,
``deploy/local/maven/s3a/pom.xml``) through ``streaming.stack.artifacts``, the code that fetches
them for the local stack, so the image has the same versions and the same filter (jars PySpark
already ships are left out); the versions are checked against the installed PySpark. Everything
in ``$SPARK_HOME/jars`` is on the driver's and the executors' classpath: no ``spark.jars``
needed.

Usage (in the Containerfile's build stage, with Maven and the source tree at $CONNMON_HOME)::

    python install-jars.py [--s3a]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from streaming.stack import artifacts


def spark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def artifact_name(jar: Path) -> str:
    """``kafka-clients-3.9.0.jar`` -> ``kafka-clients``: the rule ``streaming.stack.artifacts``
    uses to leave out jars PySpark already ships."""
    return artifacts._artifact_name(jar)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--s3a", action="store_true", help="also hadoop-aws and the AWS SDK modules it uses"
    )
    args = parser.parse_args(argv)
    version = artifacts.check_spark_version()
    dest = spark_jars_dir()
    found = artifacts.jars("spark-kafka")
    if args.s3a:
        artifacts.check_hadoop_version()
        found += artifacts.jars("s3a")
    for jar in found:
        shutil.copy2(jar, dest / jar.name)
        print(f"spark {version}: {jar.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Build and launch the Java client driver (``deploy/local/java-driver``).

``ensure_built()`` copies the pom's runtime jars with ``mvn dependency:copy-dependencies`` (into
the same local Maven repository as the broker jars, so nothing is fetched twice) and compiles the
driver with plain ``javac`` into ``java-driver-<hash>`` in the per-user cache
(``streaming.cachedir``), keyed by the hash of the pom and the sources: a second run, from
any checkout with the same sources, starts neither Maven nor javac.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from streaming.scenarios import buildstamp
from streaming.stack import artifacts

MAIN_CLASS = "ConnmonDriver"
MODES = ("producer", "idle-producer", "consumer", "stalled-consumer")


class JavaDriverError(RuntimeError):
    """The driver could not be built; the message names the failing step."""


def source_dir() -> Path:
    return artifacts.repo_root() / "deploy" / "local" / "java-driver"


def build_dir() -> Path:
    """The build of the current sources (it may not exist yet)."""
    return buildstamp.keyed_dir("java-driver", _digest())


def _digest() -> str:
    src = source_dir()
    return buildstamp.digest(src, [src / "pom.xml", *src.glob("src/*.java")])


def is_built() -> bool:
    return buildstamp.is_current(build_dir(), _digest())


def ensure_built(quiet: bool = True) -> Path:
    """Fetch the client jars and compile the driver unless already done; return the build dir."""
    stamp = _digest()
    out = buildstamp.keyed_dir("java-driver", stamp)
    if buildstamp.is_current(out, stamp):
        return out
    mvn, javac = shutil.which("mvn"), shutil.which("javac")
    if mvn is None or javac is None:
        raise JavaDriverError("the Java driver needs 'mvn' and 'javac' on PATH (a JDK + Maven)")
    part = buildstamp.start(out)
    lib, classes = part / "lib", part / "classes"
    classes.mkdir()
    if not quiet:
        print(
            "connmon: fetching kafka-clients for the Java driver (first run only)...",
            file=sys.stderr,
        )
    mvn_cmd = [
        mvn,
        "-B",
        "-f",
        str(source_dir() / "pom.xml"),
        f"-Dmaven.repo.local={artifacts.cache_dir() / 'm2'}",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={lib}",
    ]
    if quiet:
        mvn_cmd.insert(2, "-q")
    proc = subprocess.run(mvn_cmd, capture_output=quiet, text=True)
    if proc.returncode != 0:
        buildstamp.abandon(part)
        raise JavaDriverError(f"mvn failed (exit {proc.returncode}): {(proc.stdout or '')[-2000:]}")
    sources = [str(p) for p in sorted((source_dir() / "src").glob("*.java"))]
    proc = subprocess.run(
        [javac, "-d", str(classes), "-cp", str(lib / "*"), "--release", "17", *sources],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        buildstamp.abandon(part)
        raise JavaDriverError(f"javac failed: {proc.stderr[-2000:]}")
    buildstamp.finish(part, out, stamp)
    return out


def command(
    mode: str,
    app: str,
    bootstrap: str,
    topic: str,
    group: str | None = None,
    interval_ms: int | None = None,
    poll_for_s: int | None = None,
    props: dict[str, str] | None = None,
) -> list[str]:
    """The ``java ...`` argv for one driver process (the driver must be built)."""
    if mode not in MODES:
        raise ValueError(f"java driver mode {mode!r} is not one of {MODES}")
    out = build_dir()
    cp = os.pathsep.join([str(out / "classes"), str(out / "lib" / "*")])
    cmd = [
        "java",
        "-Xms32m",
        "-Xmx128m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={source_dir() / 'log4j2.properties'}",
        "-cp",
        cp,
        MAIN_CLASS,
        *driver_args(mode, app, bootstrap, topic, group, interval_ms, props),
    ]
    if poll_for_s is not None:
        cmd += ["--poll-for-s", str(poll_for_s)]
    return cmd


def driver_args(
    mode: str,
    app: str,
    bootstrap: str,
    topic: str,
    group: str | None = None,
    interval_ms: int | None = None,
    props: Mapping[str, str] | None = None,
) -> list[str]:
    """The command line every scenario client program takes (this driver, the Go and Node.js
    programs): ``--mode --app --bootstrap --topic [--group] [--interval-ms] [--prop k=v]...``."""
    args = ["--mode", mode, "--app", app, "--bootstrap", bootstrap, "--topic", topic]
    if group:
        args += ["--group", group]
    if interval_ms is not None:
        args += ["--interval-ms", str(interval_ms)]
    for k, v in (props or {}).items():
        args += ["--prop", f"{k}={v}"]
    return args


if __name__ == "__main__":
    print(ensure_built(quiet=False))

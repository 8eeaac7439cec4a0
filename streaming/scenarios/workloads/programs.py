"""Workloads whose Kafka client is not Python: Sarama and franz-go (Go programs built from
``deploy/local/go-clients``) and kafkajs (a Node.js script from ``deploy/local/node-clients``).

Every program takes the same command line as the Java driver::

    PROGRAM --mode producer|idle-producer|consumer --app NAME --bootstrap B --topic T
            [--group G] [--interval-ms N] [--prop key=value]...

``--prop`` passes a library setting (each program's ``--help`` lists the ones it knows and
rejects any other). The launcher starts the program itself (through ``nice``, which execs it),
so the process the monitor sees is the client; ``python -m
streaming.scenarios.workloads.programs --client sarama --mode ...`` (builds if needed, then
replaces itself with the program) is for trying one by hand.

The programs run at a lower CPU priority (``nice -n 10``): a session runs every scenario and
connmon's own job, the component under test, on 2 cores, and the job already falls behind its
5 s trigger there. Priority changes when a client runs, not what it does on the wire.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Mapping

from streaming.scenarios import goclients, javadriver, nodeclients

MODES = ("producer", "idle-producer", "consumer")
NICE = ("nice", "-n", "10")
# client kind (streaming.scenarios.model.CLIENTS) -> library, for reports and docs
LIBRARIES = {
    "sarama": "github.com/IBM/sarama (Go)",
    "franz-go": "github.com/twmb/franz-go (Go)",
    "kafkajs": "kafkajs (Node.js)",
}


def program(client: str) -> list[str]:
    """The argv prefix that starts a client kind's program, built first if needed."""
    if client == "kafkajs":
        nodeclients.ensure_built()
        return [nodeclients.node(), str(nodeclients.script())]
    if client in goclients.PROGRAMS:
        goclients.ensure_built()
        return [str(goclients.binary(client))]
    raise ValueError(f"client {client!r} is not one of {sorted(LIBRARIES)}")


def command(
    client: str,
    mode: str,
    app: str,
    bootstrap: str,
    topic: str,
    group: str | None = None,
    interval_ms: int | None = None,
    props: Mapping[str, str] | None = None,
) -> list[str]:
    """The full argv of one workload process."""
    if mode not in MODES:
        raise ValueError(f"{client} mode {mode!r} is not one of {MODES}")
    nice = list(NICE) if shutil.which(NICE[0]) else []
    args = javadriver.driver_args(mode, app, bootstrap, topic, group, interval_ms, props)
    return [*nice, *program(client), *args]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--client", required=True, choices=sorted(LIBRARIES))
    p.add_argument("--mode", required=True, choices=MODES)
    p.add_argument("--app", required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group")
    p.add_argument("--interval-ms", type=int)
    p.add_argument("--prop", action="append", default=[], help="library setting key=value")
    args = p.parse_args(argv)
    props = dict(item.partition("=")[::2] for item in args.prop)
    cmd = command(
        args.client,
        args.mode,
        args.app,
        args.bootstrap,
        args.topic,
        args.group,
        args.interval_ms,
        props,
    )
    os.execv(cmd[0], cmd)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())

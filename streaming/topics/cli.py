"""``connmon topics create|check``: create connmon's topics as docs/topics.md defines them, or
check that a cluster has them so.

Exit status: 0 all topics as configured; 1 a topic is missing or differs (one line each);
2 a wrong setting; 3 the cluster could not be reached or refused a request.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from streaming.errors import ConfigError
from streaming.options import parse_pairs, read_config_file
from streaming.topics import acls, admin
from streaming.topics.plan import Plan, plan
from streaming.topics.spec import TopicSpec, build_specs, check_top, overrides_to_settings

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_DIFFERS, EXIT_UNREACHABLE = 1, 3


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "topics",
        help="create connmon's Kafka topics, or check a cluster has them as configured",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    create = sub.add_parser(
        "create",
        help="create the missing topics; report (or with --alter fix) the configs that differ",
    )
    check = sub.add_parser("check", help="exit 1 with one line per missing or wrong setting")
    acl = sub.add_parser(
        "acls",
        help="print (or with --apply create) the Kafka ACLs each component's principal needs",
    )
    for q in (create, check, acl):
        q.add_argument(
            "--bootstrap-servers",
            help="Kafka bootstrap servers (default: the config file, $CONNMON_BOOTSTRAP_SERVERS "
            f"or {DEFAULT_BOOTSTRAP})",
        )
        q.add_argument("--config", help="YAML or TOML file: topics, kafka, replication_factor")
        q.add_argument(
            "--set",
            action="append",
            metavar="ROLE.SETTING=VALUE",
            dest="topic_set",
            help="override a topic setting, e.g. events.partitions=24, "
            "findings.retention.ms=86400000, replication_factor=2 (repeatable)",
        )
        q.add_argument(
            "--kafka-config",
            action="append",
            metavar="KEY=VALUE",
            help="librdkafka setting of the admin client, e.g. security.protocol=SSL (repeatable)",
        )
        q.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    create.add_argument(
        "--alter",
        action="store_true",
        help="also set the topic configs that differ (never partitions or replication)",
    )
    create.add_argument("--dry-run", action="store_true", help="print what would change, only")
    create.set_defaults(func=run_create)
    check.set_defaults(func=run_check)
    acl.add_argument(
        "--principal",
        action="append",
        metavar="COMPONENT=TYPE:NAME",
        help="a component's principal (agent, job, exporter, admin; default "
        "User:connmon-<component>), repeatable",
    )
    acl.add_argument(
        "--component",
        action="append",
        choices=acls.COMPONENTS,
        help="only this component's ACLs (repeatable; default all)",
    )
    acl.add_argument(
        "--no-check-topics",
        dest="check_topics",
        action="store_false",
        help="the components run with check_topics off: no DescribeConfigs",
    )
    acl.add_argument(
        "--command-config",
        metavar="FILE",
        help="the client properties file the printed kafka-acls commands pass on",
    )
    acl.add_argument(
        "--apply",
        action="store_true",
        help="create the ACLs with the admin client (its principal needs ALTER on the cluster)",
    )
    acl.set_defaults(func=run_acls)


def read_file(path: str) -> dict[str, Any]:
    data = read_config_file(path)
    check_top(data, path)
    return data


def settings(args: argparse.Namespace) -> tuple[tuple[TopicSpec, ...], dict[str, str]]:
    """(topic specs, admin client settings) from the file, ``--set`` and the flags."""
    file = read_file(args.config) if args.config else {}
    overrides = overrides_to_settings(parse_pairs("set", args.topic_set))
    specs = build_specs(file, overrides)
    kafka = file.get("kafka") or {}
    if not isinstance(kafka, dict):
        raise ConfigError("kafka: must be a mapping of librdkafka settings")
    conf = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in kafka.items()}
    conf.update(parse_pairs("kafka-config", args.kafka_config))
    bootstrap = (
        args.bootstrap_servers
        or conf.get("bootstrap.servers")
        or file.get("bootstrap_servers")
        or os.environ.get("CONNMON_BOOTSTRAP_SERVERS")
        or DEFAULT_BOOTSTRAP
    )
    conf["bootstrap.servers"] = str(bootstrap).strip()
    if args.timeout <= 0:
        raise ConfigError(f"timeout: must be positive, not {args.timeout}")
    return specs, conf


def _describe(args: argparse.Namespace) -> tuple[tuple[TopicSpec, ...], Any, int, Plan] | int:
    specs, conf = settings(args)
    client = admin.admin_client(conf, "kafka/kafka-config")
    action = "alter" if getattr(args, "alter", False) else args.topics_command
    wanted = acls.admin_grants({s.name: s.role for s in specs}, action)
    try:
        lacking = admin.missing_acls(client, wanted, args.timeout)
        if lacking:  # the topics would look missing: say why instead
            for g in lacking:
                print(f"lacks ACL {g}")
            return EXIT_UNREACHABLE
        brokers, described = admin.describe(client, [s.name for s in specs], args.timeout)
    except admin.ClusterUnreachable as exc:
        print(f"connmon topics: cannot describe topics at {conf['bootstrap.servers']}: {exc}",
              file=sys.stderr)  # fmt: skip
        return EXIT_UNREACHABLE
    return specs, client, brokers, plan(specs, described, brokers)


def run_check(args: argparse.Namespace) -> int:
    got = _describe(args)
    if isinstance(got, int):
        return got
    specs, _, brokers, p = got
    order = {s.name: i for i, s in enumerate(specs)}
    problems = sorted([*p.missing(), *p.problems], key=lambda x: order.get(x.topic, 0))
    for line in problems:
        print(line)
    if problems:
        return EXIT_DIFFERS
    print(f"{len(specs)} topics as configured ({brokers} broker(s))")
    return 0


def _describe_spec(s: TopicSpec) -> str:
    configs = " ".join(f"{k}={v}" for k, v in sorted(s.configs.items()))
    return f"{s.partitions} partition(s), replication {s.replication_factor}, {configs}"


def _wait_visible(client: Any, names: list[str], timeout_s: float) -> dict | None:
    """Describe topics another client just created (a broker lists a new topic a moment after
    the controller made it); None if the cluster stopped answering."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _, found = admin.describe(client, names, timeout_s)
        except admin.ClusterUnreachable as exc:
            print(f"connmon topics: cannot describe {', '.join(names)}: {exc}", file=sys.stderr)
            return None
        if all(d is not None for d in found.values()) or time.monotonic() >= deadline:
            return found
        time.sleep(0.5)


def run_create(args: argparse.Namespace) -> int:
    got = _describe(args)
    if isinstance(got, int):
        return got
    specs, client, brokers, p = got
    verb = "would create" if args.dry_run else "created"
    status = 0
    results = {} if args.dry_run else admin.create(client, p.create, args.timeout)
    raced: list[TopicSpec] = []
    for s in p.create:
        err = results.get(s.name)
        if err is None:
            print(f"{verb} {s.name}: {_describe_spec(s)}")
        elif err.startswith("TOPIC_ALREADY_EXISTS"):
            raced.append(s)  # created since the metadata request: compared below
        elif err.startswith("TOPIC_AUTHORIZATION_FAILED"):
            print(f"{s.name}: not created: lacks ACL CREATE on topic {s.name} ({err})")
            status = EXIT_UNREACHABLE
        else:
            print(f"{s.name}: not created: {err}")
            status = EXIT_UNREACHABLE
    made = [s.name for s in p.create if results.get(s.name) is None and not args.dry_run]
    if made:  # so that a check or a component started next finds them
        seen = _wait_visible(client, made, args.timeout)
        if seen is None:
            return EXIT_UNREACHABLE
        for name in [n for n, d in seen.items() if d is None]:
            print(f"{name}: created, but its broker does not list it yet")
    if raced:
        again = _wait_visible(client, [s.name for s in raced], args.timeout)
        if again is None:
            return EXIT_UNREACHABLE
        for name in [n for n, d in again.items() if d is None]:
            print(f"{name}: exists but its broker does not list it yet; run connmon topics check")
            status = status or EXIT_DIFFERS
        p = Plan(p.create, p.problems + plan(raced, again, brokers).problems)
    created = {s.name for s in p.create} - {s.name for s in raced}
    existing = [s.name for s in specs if s.name not in created]
    if existing:
        print(f"exist: {', '.join(existing)}")
    changes = p.alter() if args.alter else {}
    altered = {} if args.dry_run else admin.alter(client, changes, args.timeout)
    for problem in p.problems:
        if problem.fixable and args.alter:
            err = altered.get(problem.topic)
            if err is None:
                done = "would set" if args.dry_run else "set"
                print(f"{problem.topic}: {done} {problem.setting}={problem.want} "
                      f"(was {problem.have})")  # fmt: skip
                continue
            print(f"{problem}: alter failed: {err}")
            status = status or EXIT_UNREACHABLE
            continue
        hint = (
            "not changed: run with --alter"
            if problem.fixable
            else "not changed: connmon never changes partitions or replication"
        )
        print(f"{problem} ({hint})")
        status = status or EXIT_DIFFERS
    return status


def run_acls(args: argparse.Namespace) -> int:
    """Print the ``kafka-acls.sh`` commands granting each component's principal what it needs
    on the configured topic names, or create those ACLs (``--apply``)."""
    specs, conf = settings(args)
    principals = acls.parse_principals(parse_pairs("principal", args.principal))
    names = {s.role: s.name for s in specs}
    bindings = [
        (principals[c], g)
        for c in args.component or acls.COMPONENTS
        for g in acls.grants(c, acls.topics_of(c, names), args.check_topics)
    ]
    if not args.apply:
        for line in acls.kafka_acls_commands(
            bindings, conf["bootstrap.servers"], args.command_config
        ):
            print(line)
        return 0
    client = admin.admin_client(conf, "kafka/kafka-config")
    failed = admin.create_acls(client, bindings, args.timeout)
    if failed and all(e.startswith("CLUSTER_AUTHORIZATION_FAILED") for e in failed.values()):
        print("connmon topics acls: the admin client's principal may not create ACLs (it needs "
              "ALTER on the cluster; a super user has it)", file=sys.stderr)  # fmt: skip
        return EXIT_UNREACHABLE
    for principal, g in bindings:
        err = failed.get((principal, g))
        print(f"{principal}: {g}: {err or 'allowed'}")
    return EXIT_UNREACHABLE if failed else 0

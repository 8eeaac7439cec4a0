"""The shipped systemd unit's sandbox, applied to the real agent. The unit
(deploy/systemd/connmon-agent.service) is read as committed, its sandbox settings are turned into
the restrictions systemd makes (capability sets of a non-root user, no_new_privs, and seccomp
filters equal to systemd's for RestrictNamespaces, RestrictAddressFamilies and
MemoryDenyWriteExecute), and ``connmon agent --once`` runs under them while a client of another
user holds a CLOSE_WAIT socket in a network namespace of its own. The socket must come from a
sock_diag dump made inside that namespace (setns(2) allowed), with its process.

systemd is not needed: the restrictions are applied with ``setpriv`` and a seccomp filter that
libseccomp builds, loaded by a small Python launcher through ctypes. A setting of the unit's
[Service] section that the sandbox does not know fails the test, so a new restriction in the
unit cannot go untested. Skipped, with the reason, without root, ``setpriv``, ``ip``,
libseccomp or a network namespace."""

from __future__ import annotations

import ctypes.util
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from agent_helpers import REPO, Holder, close_wait_in_netns

pytestmark = pytest.mark.integration

UNIT = REPO / "deploy" / "systemd" / "connmon-agent.service"
CLIENT_UID = 1234  # the Kafka client's user
AGENT_UID = 1235  # stands for the unit's User=

# [Service] settings the sandbox applies.
APPLIED = {
    "User",
    "Group",
    "AmbientCapabilities",
    "CapabilityBoundingSet",
    "NoNewPrivileges",
    "RestrictNamespaces",
    "RestrictAddressFamilies",
    "MemoryDenyWriteExecute",
}
# Settings that do not change what the agent can see: how it is started and stopped, resource
# limits, and read-only or private mounts of what it never writes (it reads /proc, /sys and
# its configuration, and writes nothing but its output).
NOT_RELEVANT = {
    "Type",
    "EnvironmentFile",
    "ExecStart",
    "Restart",
    "RestartSec",
    "KillSignal",
    "TimeoutStopSec",
    "MemoryMax",
    "ProtectSystem",
    "ProtectHome",
    "PrivateTmp",
    "PrivateDevices",
    "ProtectKernelTunables",
    "ProtectKernelModules",
    "ProtectControlGroups",
    "LockPersonality",
    "SystemCallArchitectures",
}

# systemd's namespace types and their clone flags.
NAMESPACE_FLAGS = {
    "cgroup": 0x02000000,
    "ipc": 0x08000000,
    "net": 0x40000000,
    "mnt": 0x00020000,
    "pid": 0x20000000,
    "user": 0x10000000,
    "uts": 0x04000000,
    "time": 0x00000080,
}
ALL_NAMESPACES = sum(NAMESPACE_FLAGS.values())
EPERM, ENOSYS, EAFNOSUPPORT = 1, 38, 97
SCMP_CMP_EQ, SCMP_CMP_GT, SCMP_CMP_MASKED_EQ = 4, 6, 7
PROT_WRITE, PROT_EXEC, SHM_EXEC = 0x2, 0x4, 0o100000

# Loads a seccomp filter (JSON rules: [errno, syscall, [arg, op, a, b]...]) and execs argv[2:].
# Like systemd, it loads the filter while still privileged and leaves no_new_privs to the unit.
LOADER = r"""
import ctypes, ctypes.util, json, os, sys

class Cmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]

lib = ctypes.CDLL(ctypes.util.find_library("seccomp"))
lib.seccomp_init.restype = ctypes.c_void_p
lib.seccomp_init.argtypes = [ctypes.c_uint32]
lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
lib.seccomp_rule_add_exact_array.argtypes = [
    ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(Cmp)]
lib.seccomp_load.argtypes = [ctypes.c_void_p]
ctx = lib.seccomp_init(0x7FFF0000)  # SCMP_ACT_ALLOW
if lib.seccomp_attr_set(ctx, 3, 0) != 0:  # SCMP_FLTATR_CTL_NNP off
    sys.exit("seccomp_attr_set failed")
for err, name, *cmps in json.loads(sys.argv[1]):
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    arr = (Cmp * max(1, len(cmps)))(*(Cmp(*c) for c in cmps))
    rc = lib.seccomp_rule_add_exact_array(ctx, 0x00050000 | err, nr, len(cmps), arr)
    if rc != 0:
        sys.exit(f"seccomp rule {name} {cmps}: {os.strerror(-rc)}")
rc = lib.seccomp_load(ctx)
if rc != 0:
    sys.exit(f"seccomp_load: {os.strerror(-rc)}")
os.execvp(sys.argv[2], sys.argv[2:])
"""


def service_settings(text: str) -> dict[str, list[str]]:
    """The [Service] assignments of a unit file, each key's values in order (an empty
    assignment resets a list, as in systemd)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section != "[Service]":
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not KEY=VALUE in [Service]: {raw!r}"
        key, value = key.strip(), value.strip()
        out[key] = [] if not value else [*out.get(key, []), value]
    return out


def _bool(values: list[str]) -> bool:
    return bool(values) and values[-1].lower() in ("yes", "true", "on", "1")


def _caps(values: list[str]) -> list[str] | None:
    """setpriv's names of a capability list (``CAP_SYS_ADMIN`` -> ``sys_admin``); None when
    unset."""
    if not values:
        return None
    return [c.lower().removeprefix("cap_") for v in values for c in v.split()]


def allowed_namespaces(values: list[str]) -> int:
    """The clone flags of the namespace types ``RestrictNamespaces=`` allows: yes none, no all,
    a list only those, a list after ``~`` all but those."""
    if not values:
        return ALL_NAMESPACES
    value = values[-1]
    if value.lower() in ("yes", "true", "on", "1"):
        return 0
    if value.lower() in ("no", "false", "off", "0"):
        return ALL_NAMESPACES
    invert = value.startswith("~")
    listed = 0
    for name in value.removeprefix("~").split():
        assert name in NAMESPACE_FLAGS, f"RestrictNamespaces: unknown type {name!r}"
        listed |= NAMESPACE_FLAGS[name]
    return ALL_NAMESPACES & ~listed if invert else listed


def _family(name: str) -> int:
    return int(getattr(socket, name))


@dataclass
class Sandbox:
    ambient: list[str]
    bounding: list[str] | None  # None: every capability
    no_new_privs: bool
    namespaces: int  # clone flags of the allowed namespace types
    families: set[int] | None  # None: every address family
    deny_write_execute: bool

    def seccomp_rules(self) -> list[list]:
        """The rules systemd's filters hold for these settings: [errno, syscall, cmp...]."""
        rules: list[list] = []
        ns = self.namespaces
        if ns != ALL_NAMESPACES:
            # No flags to check in clone3's argument: refused with ENOSYS, libc uses clone.
            rules.append([ENOSYS, "clone3"])
            if ns == 0:
                rules.append([EPERM, "setns"])
            else:
                rules.append([EPERM, "setns", [1, SCMP_CMP_EQ, 0, 0]])
            for flag in NAMESPACE_FLAGS.values():
                if ns & flag:
                    continue
                masked = [SCMP_CMP_MASKED_EQ, flag, flag]
                rules += [[EPERM, "unshare", [0, *masked]], [EPERM, "clone", [0, *masked]]]
                if ns:
                    rules.append([EPERM, "setns", [1, *masked]])
        if self.families is not None:
            top = max(self.families, default=0)
            rules += [
                [EAFNOSUPPORT, "socket", [0, SCMP_CMP_EQ, af, 0]]
                for af in range(top)
                if af not in self.families
            ]
            rules.append([EAFNOSUPPORT, "socket", [0, SCMP_CMP_GT, top, 0]])
        if self.deny_write_execute:
            wx = PROT_WRITE | PROT_EXEC
            rules += [
                [EPERM, "mmap", [2, SCMP_CMP_MASKED_EQ, wx, wx]],
                [EPERM, "mprotect", [2, SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC]],
                [EPERM, "pkey_mprotect", [2, SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC]],
                [EPERM, "shmat", [2, SCMP_CMP_MASKED_EQ, SHM_EXEC, SHM_EXEC]],
            ]
        return rules

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run as the unit's non-root user under these restrictions."""
        inherit = ",".join(["-all", *(f"+{c}" for c in self.ambient)])
        bounding = ",".join(["-all", *(f"+{c}" for c in self.bounding)]) if self.bounding else None
        setpriv = [
            "setpriv", f"--reuid={AGENT_UID}", f"--regid={AGENT_UID}", "--clear-groups",
            f"--inh-caps={inherit}", f"--ambient-caps={inherit}",
        ]  # fmt: skip
        if bounding is not None:
            setpriv.append(f"--bounding-set={bounding}")
        if self.no_new_privs:
            setpriv.append("--no-new-privs")
        rules = json.dumps(self.seccomp_rules())
        return [sys.executable, "-c", LOADER, rules, *setpriv, "--", *argv]


def sandbox_of(text: str) -> Sandbox:
    """The sandbox a unit file's [Service] section describes; fails on a setting it does not
    know, which might restrict the agent."""
    s = service_settings(text)
    unknown = sorted(set(s) - APPLIED - NOT_RELEVANT)
    assert not unknown, f"the sandbox does not apply {unknown}: teach it these settings"
    assert s.get("User"), "the unit runs the agent as a user of its own"
    families = None
    if s.get("RestrictAddressFamilies"):
        names = s["RestrictAddressFamilies"][-1].split()
        assert not names[0].startswith("~"), "only an allow list of address families is known"
        families = {_family(n) for n in names}
    return Sandbox(
        ambient=_caps(s.get("AmbientCapabilities", [])) or [],
        bounding=_caps(s.get("CapabilityBoundingSet", [])),
        no_new_privs=_bool(s.get("NoNewPrivileges", [])),
        namespaces=allowed_namespaces(s.get("RestrictNamespaces", [])),
        families=families,
        deny_write_execute=_bool(s.get("MemoryDenyWriteExecute", [])),
    )


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


Client = Holder


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """A process of another user in a network namespace of its own, holding a client socket
    in CLOSE_WAIT to a "broker" port in that namespace."""
    why = "the test sets the unit's user, capabilities and filters"
    if ctypes.util.find_library("seccomp") is None:
        pytest.skip("needs libseccomp (libseccomp2) to build the unit's seccomp filters")
    with close_wait_in_netns(CLIENT_UID, "connmon-unit-client", why) as holder:
        yield holder


@dataclass
class Scan:
    events: list[dict]
    log: str

    def client_socket(self, c: Client) -> dict | None:
        found = [
            e
            for e in self.events
            if e.get("kind") == "opened"
            and e.get("broker_endpoint") == f"127.0.0.1:{c.port}"
            and e.get("state") == "CLOSE_WAIT"
        ]
        return found[0] if found else None


def scan_under(unit_text: str, c: Client, tmp_path: Path) -> Scan:
    """One scan of the real agent (``connmon agent --once --output -``) in the sandbox of
    ``unit_text``."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "host": "unittest",
                "metrics_address": "",
                "ebpf": "off",
                "network_namespaces": "all",
                "kubernetes": {"api": "off"},
                "clusters": [{"name": "local", "endpoints": [f"1@127.0.0.1:{c.port}"]}],
                "apps": [{"match": "connmon-unit-client", "name": "client"}],
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONNMON_AGENT_")}
    argv = [str(REPO / ".venv" / "bin" / "connmon"), "agent", "--config", str(cfg),
            "--once", "--output", "-"]  # fmt: skip
    done = subprocess.run(
        sandbox_of(unit_text).command(argv),
        capture_output=True, text=True, timeout=60, cwd="/", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return Scan(events, done.stderr)


def test_the_unit_lets_the_agent_dump_a_client_namespace(client: Client, tmp_path: Path) -> None:
    scan = scan_under(UNIT.read_text(), client, tmp_path)
    sock = scan.client_socket(client)
    assert sock is not None, scan.events
    # Attributed to its process, and dumped with sock_diag inside the namespace: tcp_info's
    # numbers are there (the /proc/<pid>/net/tcp fallback has none).
    assert (sock.get("pid"), sock["app"]) == (client.pid, "client"), sock
    assert sock.get("idle_s") is not None and sock.get("rtt_s") is not None, sock
    assert "cannot enter network namespace" not in scan.log, scan.log


def test_the_sandbox_enforces_restrict_namespaces(client: Client, tmp_path: Path) -> None:
    """The check above can fail: the same unit with every namespace type forbidden (systemd's
    RestrictNamespaces=yes) makes setns fail, and the agent falls back to /proc."""
    text = UNIT.read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("RestrictNamespaces=")]
    assert lines, "the unit restricts namespaces"
    scan = scan_under(text.replace(lines[-1], "RestrictNamespaces=yes"), client, tmp_path)
    sock = scan.client_socket(client)
    assert sock is not None, scan.events
    assert sock.get("pid") == client.pid, sock
    assert sock.get("idle_s") is None and sock.get("rtt_s") is None, sock
    assert "cannot enter network namespace" in scan.log, scan.log
    assert "Operation not permitted" in scan.log, scan.log


def test_unit_settings_are_read_as_systemd_does() -> None:
    assert allowed_namespaces(["yes"]) == 0
    assert allowed_namespaces(["no"]) == ALL_NAMESPACES
    assert allowed_namespaces(["net"]) == NAMESPACE_FLAGS["net"]
    assert allowed_namespaces(["~net user"]) == ALL_NAMESPACES & ~(
        NAMESPACE_FLAGS["net"] | NAMESPACE_FLAGS["user"]
    )
    s = service_settings("[Service]\nA=x y\nA=z\n[Install]\nA=w\n")
    assert s == {"A": ["x y", "z"]}
    assert service_settings("[Service]\nA=x\nA=\nA=y\n") == {"A": ["y"]}
    net_only = sandbox_of(UNIT.read_text()).seccomp_rules()
    # setns is refused only with a zero type or a forbidden type, never for CLONE_NEWNET.
    setns = [r for r in net_only if r[1] == "setns"]
    assert setns and all(len(r) == 3 and r[2][0] == 1 for r in setns), setns
    assert not [r for r in setns if r[2][1:] == [SCMP_CMP_MASKED_EQ, 0x40000000, 0x40000000]]

"""The reads that name the library of each kind of process (the package docstring says
which): librdkafka's version for mapped files, the executable's Go modules, Rust source paths
or symbols, a JVM's jars, a Node process's ``node_modules``, a Python process's packages."""

from __future__ import annotations

import os
import re
import struct
import zlib

from streaming.agent.libraries.elf import ElfFile
from streaming.agent.libraries.golang import (
    library_from_go_modules,
    parse_go_buildinfo,
    read_go_buildinfo,
)
from streaming.agent.libraries.jars import (
    java_command,
    java_version_from_paths,
    kafka_version_in_jar,
    read_zip_directory,
)
from streaming.agent.libraries.maps import MapsEvidence
from streaming.agent.libraries.model import (
    MAX_FDS,
    MAX_JARS,
    MAX_NODE_DIRS,
    MAX_SITE_DIRS,
    MAX_ZIP_BUDGET,
    MAX_ZIP_DIRECTORY,
    UNKNOWN,
    ClientLibrary,
)
from streaming.agent.libraries.packages import (
    declares,
    dist_info_version,
    node_script,
    package_json_version,
    parent_dirs,
)
from streaming.agent.libraries.procfiles import ProcessFiles
from streaming.agent.libraries.rdkafka import rdkafka_version_of
from streaming.agent.libraries.roles import STREAMS, may_be_streams, role_of, streams_in_jar
from streaming.agent.libraries.rust import from_rust_paths, read_rodata
from streaming.agent.procs import ProcInfo

_SYSTEM_SITE = re.compile(r"^\s*include-system-site-packages\s*=\s*true\s*$", re.I | re.M)


class ProcessEvidence(ProcessFiles):
    """The evidence methods of ``LibraryIdentifier``, one kind of process each."""

    def _rdkafka_version(self, pid: int, maps: MapsEvidence) -> str | None:
        for path in (maps.librdkafka, maps.rdkafka_binding):
            if path is None:
                continue
            f = self._open_mapped(pid, path, maps.ranges)
            if f is None:
                continue
            with f:
                try:
                    version = rdkafka_version_of(ElfFile(f))
                except (ValueError, struct.error):
                    version = None
            if version:
                return version
        for path in (maps.rdkafka_binding, maps.librdkafka):
            version = self._binding_version(pid, path) if path else None
            if version:
                return version
        return None

    def _binding_version(self, pid: int, path: str) -> str | None:
        """The version of the binding package a librdkafka file belongs to."""
        if "/confluent_kafka" in path:
            site = path.split("/confluent_kafka", 1)[0]
            return dist_info_version(self._listdir(pid, site), "confluent_kafka")
        m = re.search(r"^(.*/node_modules/(?:@[^/]+/)?[^/]+)/", path)
        if m:
            text = self._read_small(pid, m.group(1) + "/package.json")
            return package_json_version(text) if text else None
        return None

    def _open_jars(self, pid: int) -> list[str]:
        fd_dir = self._proc(pid, "fd")
        try:
            names = os.listdir(fd_dir)[:MAX_FDS]
        except OSError:
            return []
        jars = []
        for name in names:
            try:
                link = os.readlink(f"{fd_dir}/{name}")
            except OSError:
                continue
            if link.endswith(".jar") or link.endswith(".jar (deleted)"):
                jars.append(link.removesuffix(" (deleted)"))
        return jars

    def _java(self, info: ProcInfo) -> ClientLibrary:
        pid = info.pid
        open_jars = self._open_jars(pid)
        cmd = java_command(info.cmdline)
        role = role_of(cmd, open_jars, lambda path: self._read_small(pid, path))
        version = java_version_from_paths(open_jars)
        if version:
            return ClientLibrary("java", version, "fd", role)
        classpath, main_jar = cmd.classpath, cmd.jar
        version = java_version_from_paths([*classpath, main_jar])
        if version:
            return ClientLibrary("java", version, "cmdline", role)
        for entry in classpath:
            if entry == "*" or entry.endswith("/*"):
                folder = entry[:-1] or "."
                version = java_version_from_paths(self._listdir(pid, folder))
                if version:
                    return ClientLibrary("java", version, "cmdline", role)
        jars = [main_jar, *open_jars, *(p for p in classpath if p.endswith(".jar"))]
        budget = MAX_ZIP_BUDGET
        for jar in list(dict.fromkeys(j for j in jars if j))[:MAX_JARS]:
            try:
                with open(self._in_proc(pid, jar), "rb") as f:
                    found = read_zip_directory(f, min(budget, MAX_ZIP_DIRECTORY))
                    if found is None:
                        continue
                    budget -= len(found[0])
                    if role is None and may_be_streams(cmd.main_class) and streams_in_jar(found[0]):
                        role = STREAMS
                    version = kafka_version_in_jar(f, *found)
            except (OSError, ValueError, struct.error, zlib.error):
                continue
            if version:
                return ClientLibrary("java", version, "jar", role)
        return ClientLibrary("java", None, "jvm", role)

    def _node(self, info: ProcInfo) -> ClientLibrary | None:
        pid = info.pid
        try:
            cwd = os.readlink(self._proc(pid, "cwd"))
        except OSError:
            cwd = None
        starts = []
        script = node_script(info.cmdline)
        if script and (script.startswith("/") or cwd):
            starts.append(os.path.dirname(os.path.join(cwd or "/", script)))
        if cwd:
            starts.append(cwd)
        dirs: list[str] = []
        for start in starts:
            dirs += [d for d in parent_dirs(start, MAX_NODE_DIRS) if d not in dirs]
        for folder in dirs[:MAX_NODE_DIRS]:
            modules = folder.rstrip("/") + "/node_modules"
            for package, name in (("kafkajs", "kafkajs"), ("node-rdkafka", "librdkafka")):
                text = self._read_small(pid, f"{modules}/{package}/package.json")
                if text is not None:
                    # The application's own manifest beside node_modules naming the library
                    # is its declared dependency, not just a package lying around.
                    manifest = self._read_small(pid, f"{folder.rstrip('/')}/package.json")
                    own = manifest is not None and declares(manifest, package)
                    source = "manifest" if own else "package"
                    return ClientLibrary(name, package_json_version(text), source)
        return None

    def _site_dirs(self, info: ProcInfo, maps: MapsEvidence) -> list[str]:
        """Site-packages directories of a Python process, as the process sees them: those of
        mapped extensions, its virtualenv's (``pyvenv.cfg`` beside ``bin/``), its prefix's."""
        pid = info.pid
        sites = list(maps.site_dirs)
        system = True
        interpreters = [info.cmdline[0] if info.cmdline else "", info.exe or ""]
        for interp in dict.fromkeys(p for p in interpreters if "/" in p):
            prefix = os.path.dirname(os.path.dirname(interp))
            cfg = self._read_small(pid, f"{prefix}/pyvenv.cfg")
            if cfg is not None:
                sites += self._lib_sites(pid, prefix)
                system = bool(_SYSTEM_SITE.search(cfg))
                continue
            if system:
                sites += self._lib_sites(pid, prefix) + self._lib_sites(pid, f"{prefix}/local")
                sites.append(f"{prefix}/lib/python3/dist-packages")
        return list(dict.fromkeys(sites))[:MAX_SITE_DIRS]

    def _lib_sites(self, pid: int, prefix: str) -> list[str]:
        out = []
        for lib in sorted(self._listdir(pid, f"{prefix}/lib")):
            if lib.startswith("python3"):
                out += [f"{prefix}/lib/{lib}/site-packages", f"{prefix}/lib/{lib}/dist-packages"]
        return out

    def _python(self, info: ProcInfo, maps: MapsEvidence) -> ClientLibrary | None:
        listings = [self._listdir(info.pid, site) for site in self._site_dirs(info, maps)]
        for project, name in (("kafka_python", "kafka-python"), ("aiokafka", "aiokafka")):
            for names in listings:
                version = dist_info_version(names, project)
                if version:
                    return ClientLibrary(name, version, "package")
        return None

    def _executable(self, pid: int, scan_rodata: bool) -> ClientLibrary | None:
        """Evidence in the executable: a Go binary's modules (UNKNOWN for a Go binary without
        a Kafka client: nothing else will tell); then, if asked, a Rust binary's source paths
        and a statically linked librdkafka's ``rd_kafka_version``."""
        try:
            with open(self._proc(pid, "exe"), "rb") as f:
                elf = ElfFile(f)
                buildinfo = read_go_buildinfo(elf)
                if buildinfo is not None:
                    found = library_from_go_modules(parse_go_buildinfo(buildinfo))
                    if found is None:
                        return UNKNOWN
                    version = rdkafka_version_of(elf) if found.name == "librdkafka" else None
                    return ClientLibrary(found.name, version, found.source) if version else found
                if not scan_rodata:
                    return None
                found = from_rust_paths(read_rodata(elf))
                if found is None or found.name == "librdkafka":
                    version = rdkafka_version_of(elf)
                    if version:
                        return ClientLibrary("librdkafka", version, "symbols")
                return found
        except (OSError, ValueError, struct.error):
            return None

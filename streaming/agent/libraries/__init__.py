"""Which Kafka client library a process uses, and its version, from read-only files under /proc.

Nothing attaches to the process: the evidence is what the kernel already shows of it, read
through ``<proc_root>/<pid>/`` (files of the process through ``root/`` and ``cwd/``, so a
process in a container is read in its own mount namespace). Each kind of process gets the
few cheap reads that name its library, most specific evidence first:

- Loaded shared objects (``maps``), for every process. A mapped ``librdkafka*.so*`` (Debian's
  ``librdkafka.so.1``, the copy bundled in confluent-kafka's Python wheel, node-rdkafka's) or
  a librdkafka binding's extension (confluent-kafka's ``cimpl``, node-rdkafka's addon) means
  ``librdkafka``. Its version is the number ``rd_kafka_version()`` returns, decoded from that
  function's two or three machine instructions (x86-64 and arm64) found through the ELF
  symbol table: the library holds no version string of its own, and the binding's
  version (confluent-kafka 2.16.1 bundles librdkafka 2.16.0) is only the fallback, from its
  ``*.dist-info`` or ``package.json``. A mapped extension under an ``aiokafka/`` package
  means ``aiokafka`` (its wheels ship compiled record modules, imported with the package),
  versioned by the ``aiokafka-<version>.dist-info`` beside it. A file that cannot be opened
  by its path (deleted, or replaced since) is read through ``map_files/`` instead.
- Java (a ``java`` executable or a mapped ``libjvm.so``): a ``kafka-clients-<version>.jar``
  among the open files (``fd/``: the JVM keeps the jars it loads classes from open), then on
  the command line's classpath (``-cp``/``-classpath``/``--class-path``, ``dir/*`` entries
  listed, ``-jar``). A fat or shaded jar, which holds kafka-clients under no name of its own,
  is recognised from its zip central directory alone: a nested ``kafka-clients-<v>.jar``
  (Spring Boot's ``BOOT-INF/lib/``) or the ``kafka/kafka-version.properties`` entry that
  kafka-clients ships, whose ``version=`` is read. At most a few jars are read, and only
  directories of bounded size. A JVM with Kafka sockets and none of that evidence is still
  ``java`` (every JVM client is built on kafka-clients), with no version.
- Go executables: the build information the Go linker writes into the ``.go.buildinfo``
  section (Go 1.18 and later: a 32-byte header, then the Go version and the module list as
  length-prefixed strings), found through the ELF section headers, so only a few kilobytes
  of a large binary are read. Its modules name the library: ``github.com/IBM/sarama`` (and
  the former ``github.com/Shopify/sarama``), ``github.com/twmb/franz-go``,
  ``github.com/segmentio/kafka-go``, and ``github.com/confluentinc/confluent-kafka-go``,
  which is ``librdkafka`` linked in statically: versioned by ``rd_kafka_version()`` when the
  binary kept its symbol table, else by the binding (each binding release bundles the
  librdkafka release of the same number).
- Node: ``node_modules/kafkajs/package.json`` (then node-rdkafka's, meaning librdkafka) in
  the directory of the script on the command line or one of its parents, then from the
  working directory up; a few levels at most.
- Python: besides ``maps`` above, kafka-python is pure Python and leaves no trace but its
  install: a ``kafka_python-<version>.dist-info`` (or ``.egg-info``) in the interpreter's
  site-packages, found from mapped files under ``site-packages``, the virtualenv of the
  interpreter (its ``pyvenv.cfg``) or the interpreter's prefix. An installed but unloaded
  aiokafka (built without extensions) is the last resort.
- Other executables: Rust binaries keep the source paths of their dependencies' panic and log
  locations in ``.rodata``; ``/kafka-<version>/src/`` is the ``kafka`` crate (kafka-rust) and
  ``/rdkafka-<version>/src/`` is rust-rdkafka (librdkafka, versioned by the bundled
  librdkafka in ``rdkafka-sys-<v>+<librdkafka version>`` when present). The read is bounded.
  A ``rd_kafka_version`` in the symbol tables is librdkafka linked in statically (Rust, C,
  C++), versioned as above.

Results are cached per process start, so a reused pid is identified again. Nothing here
raises: an unreadable or unparsable file is no evidence, and no evidence is ``unknown``.

The modules, one job each: ``model`` (what is returned, the bounds on every read); ``elf``,
``golang``, ``rdkafka``, ``maps``, ``jars``, ``packages`` and ``rust`` (parsers, each of one kind
of file, touching no /proc path); ``procfiles`` (a process's files as it sees them);
``evidence`` (the reads each kind of process gets); ``identify`` (the order they are tried in,
and the cache).
"""

from __future__ import annotations

from streaming.agent.libraries.identify import LibraryIdentifier
from streaming.agent.libraries.model import UNKNOWN, ClientLibrary

__all__ = ["UNKNOWN", "ClientLibrary", "LibraryIdentifier"]

"""Makes each ingest batch's partial rows visible to the state query all at once.

The executors write a batch's partial rows over several seconds, and the driver writes the end
markers after them. The state query reads whatever the partials topic holds when its own batch
starts, so without a gate it often takes part of an ingest batch's rows in one batch and the
rest, with the end markers, in the next: each bucket concerned is restored and saved twice, and
a finding about those rows waits a whole state batch longer.

The gate is a Kafka transaction the driver opens before the executors write, with one small
record on every partition of the partials topic, and commits after the end markers. The state
query reads with ``isolation.level=read_committed``, which stops at the first record of a
transaction still open on each partition: every record after the gate's, transactional or not,
stays hidden until it commits. The rows and end markers themselves are ordinary writes, so a
gate that fails (aborted, timed out, fenced by another driver of the same checkpoint, or
refused by the cluster) only makes them visible early, which the state query handles: a bucket
keeps rows until their batch's end arrives. A gate is never needed for correctness, so any
failure is logged and the job goes on; a gate that cannot be set up at all is turned off.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

# A transaction open longer than this is aborted by the cluster (its rows then show early).
# At most the broker's ``transaction.max.timeout.ms`` (15 min by default).
TIMEOUT_MS = 300_000
SETUP_TIMEOUT_S = 30.0  # finding the transaction coordinator, once per producer
COMMIT_TIMEOUT_S = 30.0
# Producer settings of the job that a transactional producer must not take.
_NOT_TRANSACTIONAL = frozenset({"enable.idempotence", "acks", "transactional.id"})


def gate_key(run_id: str) -> bytes:
    """Key of a gate record: never a bucket key of any run (those are ``<run>:<bucket>``), so
    the state query skips it."""
    return f"gate/{run_id}".encode()


def transactional_id(run_id: str) -> str:
    """One per checkpoint: a restarted driver aborts the transaction its predecessor left
    open at once, instead of the partials topic staying hidden until it times out."""
    return f"connmon-partials-gate-{run_id}"


class BatchGate:
    """``open`` before an ingest batch's partial rows are written, ``close`` after its end
    markers (``abort`` when the batch fails)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        run_id: str,
        conf: Mapping[str, str] | None = None,
        timeout_ms: int = TIMEOUT_MS,
    ) -> None:
        self.topic = topic
        self.run_id = run_id
        self._settings: dict[str, Any] = {
            k: v for k, v in (conf or {}).items() if k not in _NOT_TRANSACTIONAL
        }
        self._settings |= {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id(run_id),
            "transaction.timeout.ms": timeout_ms,
            "linger.ms": 0,
        }
        self._producer: Any = None
        self._partitions: list[int] = []
        self._open = False
        self.enabled = True
        self._warned: set[tuple[str, str]] = set()

    def open(self) -> None:
        """Start a transaction and place its record on every partition, acknowledged before
        this returns, so every row written after is behind it."""
        if not self.enabled:
            return
        try:
            p = self._setup()
            if p is None:
                return
            p.begin_transaction()
            self._open = True
            for partition in self._partitions:
                p.produce(self.topic, key=gate_key(self.run_id), value=b"", partition=partition)
            left = p.flush(COMMIT_TIMEOUT_S)
            if left:
                raise RuntimeError(f"{left} gate record(s) unacknowledged")
        except Exception as exc:  # noqa: BLE001 - the gate is never needed for correctness
            self._failed("open", exc)

    def close(self) -> None:
        """Commit: the batch's rows and end markers become visible together."""
        self._end("commit")

    def abort(self) -> None:
        """The batch failed: show what it wrote now (it is written again when the batch
        runs again) rather than when the transaction times out."""
        self._end("abort")

    def _end(self, step: str) -> None:
        if not self._open:
            return
        self._open = False
        p = self._producer
        try:
            (p.commit_transaction if step == "commit" else p.abort_transaction)(COMMIT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            self._failed(step, exc)

    def shutdown(self) -> None:
        self.abort()
        self._producer = None

    def _setup(self) -> Any:
        if self._producer is not None:
            return self._producer
        from confluent_kafka import KafkaException, Producer

        p = Producer(self._settings)
        try:
            p.init_transactions(SETUP_TIMEOUT_S)
            meta = p.list_topics(self.topic, timeout=SETUP_TIMEOUT_S).topics[self.topic]
            if meta.error is not None:
                raise KafkaException(meta.error)
        except Exception as exc:  # noqa: BLE001
            self.enabled = False
            log.warning(
                "partials topic %s: no transaction for the state query to wait on (%s); the "
                "state query may see an ingest batch's rows across two of its batches, which "
                "costs latency, not findings. A transactional producer needs the cluster's "
                "transaction coordinator and, with ACLs, Write on the transactional id %s",
                self.topic,
                exc,
                self._settings["transactional.id"],
            )
            return None
        self._producer = p
        self._partitions = sorted(meta.partitions)
        return p

    def _failed(self, step: str, exc: Exception) -> None:
        """Log (once per step and error) and start from a new producer next batch: a
        transaction error leaves the producer in a state only a new one is sure to leave."""
        self._open = False
        self._producer = None
        err = exc.args[0] if exc.args else exc
        name = err.name() if hasattr(err, "name") else type(exc).__name__
        if (step, name) not in self._warned:
            self._warned.add((step, name))
            log.warning(
                "partials gate: %s failed (%s); this batch's rows may show early, which costs "
                "latency, not findings; logged once per error",
                step,
                exc,
            )

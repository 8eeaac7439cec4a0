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
stays hidden until it ends. The rows and end markers themselves are ordinary writes, so the gate
is never needed for correctness: a gate that fails is aborted (or, when the producer cannot
abort, ended by a new producer of the same transactional id), which shows the rows at once,
and the state query handles rows that show early (a bucket keeps rows until their batch's end
arrives). Failures are logged and the job goes on; a gate that cannot be set up, or fails
``FAILURES_BEFORE_PAUSE`` batches in a row, is off for ``RETRY_S``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

# A transaction open longer than this is aborted by the cluster, so the gate of an ingest batch
# longer than this opens early. It also bounds how long a driver killed mid-batch, and never
# restarted on its checkpoint, hides the partials topic from every reader.
TIMEOUT_MS = 60_000
SETUP_TIMEOUT_S = 30.0  # finding the transaction coordinator, once per producer
STEP_TIMEOUT_S = 30.0  # acknowledging the gate records, committing, aborting
RETRY_S = 600.0
FAILURES_BEFORE_PAUSE = 3
# Settings of the job's producers that a transactional producer sets itself, or refuses when
# larger than its transaction timeout (the gate's few records need none of them).
_NOT_FOR_THE_GATE = frozenset(
    {
        "enable.idempotence",
        "acks",
        "transactional.id",
        "transaction.timeout.ms",
        "message.timeout.ms",
        "delivery.timeout.ms",
        "socket.timeout.ms",
        "retries",
        "max.in.flight",
        "max.in.flight.requests.per.connection",
    }
)


def gate_key(run_id: str) -> bytes:
    """Key of a gate record: never a bucket key of any run (those are ``<run>:<bucket>``, and
    a run id has no ``/``), so the state query skips it."""
    return f"gate/{run_id}".encode()


def transactional_id(run_id: str) -> str:
    """One per checkpoint: a driver restarted on it ends the transaction its predecessor left
    open when it sets up its own gate, instead of the topic staying hidden until the timeout."""
    return f"connmon-partials-gate-{run_id}"


class GateError(RuntimeError):
    """A gate record was not delivered."""


class BatchGate:
    """``open`` before an ingest batch's partial rows are written, ``close`` after its end
    markers, ``abort`` when the batch fails; ``shutdown`` when the job stops (from any thread)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        run_id: str,
        conf: Mapping[str, str] | None = None,
        timeout_ms: int = TIMEOUT_MS,
        retry_s: float = RETRY_S,
    ) -> None:
        self.topic = topic
        self.run_id = run_id
        self.retry_s = retry_s
        self._settings: dict[str, Any] = {
            k: v for k, v in (conf or {}).items() if k not in _NOT_FOR_THE_GATE
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
        self._closed = False
        self._failures = 0  # batches in a row whose gate failed
        self.failures_total = 0  # gates that failed or could not be set up, since start
        self._off_until = 0.0  # monotonic time: set up again from then on
        self._lock = threading.Lock()
        self._warned: set[tuple[str, str]] = set()

    @property
    def enabled(self) -> bool:
        """False while a gate that failed waits to be tried again."""
        return time.monotonic() >= self._off_until

    def open(self) -> None:
        """Start a transaction and place its record on every partition, each acknowledged
        before this returns, so every row written after is behind it."""
        with self._lock:
            if self._closed or not self.enabled:
                return
            try:
                p = self._setup()
                if p is None:
                    return
                p.begin_transaction()
                self._open = True
                errors: list[Any] = []

                def delivered(err: Any, _msg: Any) -> None:
                    if err is not None:
                        errors.append(err)

                for partition in self._partitions:
                    p.produce(
                        self.topic,
                        key=gate_key(self.run_id),
                        value=b"",
                        partition=partition,
                        on_delivery=delivered,
                    )
                left = p.flush(STEP_TIMEOUT_S)
                if left or errors:
                    raise GateError(f"{left} gate record(s) unacknowledged; errors: {errors[:3]}")
            except Exception as exc:  # noqa: BLE001 - the gate is never needed for correctness
                self._failed("open", exc)

    def close(self) -> None:
        """Commit: the batch's rows and end markers become visible together."""
        with self._lock:
            self._end(commit=True)

    def abort(self) -> None:
        """The batch failed: show what it wrote now (it is written again when the batch runs
        again) rather than when the transaction times out."""
        with self._lock:
            self._end(commit=False)

    def shutdown(self, wait_s: float = 5.0) -> None:
        """End any open transaction and close the producer. A batch still holding the gate
        after ``wait_s`` closes it itself when it ends."""
        self._closed = True
        if not self._lock.acquire(timeout=wait_s):
            return
        try:
            self._end(commit=False)
        finally:
            self._lock.release()

    def _end(self, commit: bool) -> None:
        if self._open:
            p = self._producer
            try:
                try:
                    (p.commit_transaction if commit else p.abort_transaction)(STEP_TIMEOUT_S)
                except Exception as exc:
                    err = _error(exc)
                    if not (commit and err is not None and err.retriable()):
                        raise
                    p.commit_transaction(STEP_TIMEOUT_S)  # a retriable error (a timeout): again
                self._open = False
                self._failures = 0
            except Exception as exc:  # noqa: BLE001
                self._failed("commit" if commit else "abort", exc)
        if self._closed:
            self._close_producer()

    def _setup(self) -> Any:
        if self._producer is not None:
            return self._producer
        from confluent_kafka import KafkaException, Producer

        try:
            p = Producer(self._settings)
            self._producer = p
            p.init_transactions(SETUP_TIMEOUT_S)
            meta = p.list_topics(self.topic, timeout=SETUP_TIMEOUT_S).topics[self.topic]
            if meta.error is not None:
                raise KafkaException(meta.error)
            if not meta.partitions:
                raise GateError("the topic has no partitions")
        except Exception as exc:  # noqa: BLE001
            self.failures_total += 1
            self._close_producer()
            self._pause()
            self._warn(
                "setup",
                exc,
                "partials topic %s: no transaction for the state query to wait on (%s); tried "
                "again in %.0f s. Meanwhile the state query may see an ingest batch's rows "
                "across two of its batches, which costs latency, not findings. A transactional "
                "producer needs the cluster's transaction coordinator and, with ACLs, Write on "
                "the transactional id %s",
                self.topic,
                exc,
                self.retry_s,
                self._settings["transactional.id"],
            )
            return None
        self._partitions = sorted(meta.partitions)
        return p

    def _failed(self, step: str, exc: Exception) -> None:
        """End a transaction still open now, so the rows behind it show: abort it, or, when
        this producer cannot (a fatal error such as being fenced), close the producer and set
        up a new one, whose start ends any transaction of the same id at the cluster."""
        self._warn(
            step,
            exc,
            "partials gate: %s failed (%s); the transaction is ended, so this batch's rows show "
            "early, which costs latency, not findings",
            step,
            exc,
        )
        self.failures_total += 1
        err = _error(exc)
        fatal = err is not None and err.fatal()
        if self._open:
            self._open = False
            ended = False
            if step != "abort" and not fatal:
                try:
                    self._producer.abort_transaction(STEP_TIMEOUT_S)
                    ended = True
                except Exception:  # noqa: BLE001
                    log.debug("aborting the gate's transaction failed", exc_info=True)
            if not ended:
                self._close_producer()
                if not self._closed and not _fenced(err):  # fenced: the fencer ended it
                    self._setup()
        elif fatal:
            self._close_producer()
        self._failures += 1
        if self._failures >= FAILURES_BEFORE_PAUSE:
            self._pause()

    def _pause(self) -> None:
        self._failures = 0
        self._off_until = time.monotonic() + self.retry_s

    def _close_producer(self) -> None:
        p, self._producer = self._producer, None
        if p is not None:
            try:
                p.close()  # aborts a transaction still open, when the cluster can be reached
            except Exception:  # noqa: BLE001
                log.debug("closing the gate's producer failed", exc_info=True)

    def _warn(self, step: str, exc: Exception, msg: str, *args: Any) -> None:
        """Log once per step and error: a cluster that keeps refusing must not flood the log."""
        err = _error(exc)
        name = err.name() if err is not None else type(exc).__name__
        if (step, name) not in self._warned:
            self._warned.add((step, name))
            log.warning(msg + "; logged once per error", *args)


def _error(exc: BaseException) -> Any:
    """The ``KafkaError`` a confluent-kafka exception carries, or None."""
    err = exc.args[0] if exc.args else None
    return err if hasattr(err, "fatal") and hasattr(err, "retriable") else None


def _fenced(err: Any) -> bool:
    """Another producer of the same transactional id took over (and ended our transaction)."""
    from confluent_kafka import KafkaError

    fenced = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    return err is not None and err.code() in fenced

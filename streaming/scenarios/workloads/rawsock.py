"""Raw-socket Kafka clients for the pathologies a real library will not produce on demand.

Each connection speaks real Kafka (an ApiVersions v0 request, whose response is read) so the
broker treats it as a client. Modes:

- ``close-wait-leak``: opens a connection every interval (up to ``--max-connections``), then
  never reads nor closes it. When the broker reaps it (``connections.max.idle.ms``) the socket
  sits in CLOSE_WAIT for as long as the process lives: the Sarama / kafka-rust leak. With
  ``--also host:port`` the same process also keeps one connection to that (other cluster's)
  broker busy with an ApiVersions round trip every interval: healthy, never idle.
- ``churn``: connect, ApiVersions, close after ``--hold-ms``, a new connection every interval:
  the client closes first, so each connection leaves a TIME_WAIT socket on this host for 60 s
  (TIME_WAIT pile-up). Holding each one briefly (default 1.5 s) lets a once-a-second scanner
  see it with its owning process before it turns into an ownerless TIME_WAIT socket.
"""

from __future__ import annotations

import collections
import itertools
import socket
import struct
import time

from streaming.scenarios.workloads import common

API_VERSIONS = 18


def api_versions_request(correlation_id: int, client_id: str) -> bytes:
    """An ApiVersions v0 request with request header v1 (size-prefixed)."""
    cid = client_id.encode()
    body = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(cid)) + cid
    return struct.pack(">i", len(body)) + body


def parse_endpoints(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            common.die(f"--bootstrap {item!r}: expected host:port")
        out.append((host, int(port)))
    return out


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection mid-response")
        buf += chunk
    return buf


def handshake(endpoint: tuple[str, int], correlation_id: int, app: str) -> socket.socket:
    """Connect and complete one ApiVersions round trip; the socket stays open."""
    sock = socket.create_connection(endpoint, timeout=5)
    _round_trip(sock, correlation_id, app)
    return sock


def _round_trip(sock: socket.socket, correlation_id: int, app: str) -> None:
    sock.sendall(api_versions_request(correlation_id, app))
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    _recv_exact(sock, size)


def leak(
    app: str,
    endpoints: list[tuple[str, int]],
    interval_ms: int,
    max_conns: int,
    also: tuple[str, int] | None = None,
) -> None:
    held: list[socket.socket] = []  # never closed, never read again: that is the bug
    busy: socket.socket | None = None
    targets = itertools.cycle(endpoints)
    for n in itertools.count():
        if common.STOP.is_set():
            break
        if also is not None:
            try:
                if busy is None:
                    busy = handshake(also, n, app)
                    common.status(app, f"busy connection to {also[0]}:{also[1]}")
                else:
                    _round_trip(busy, n, app)
            except OSError as exc:
                common.status(app, f"busy connection to {also[0]}:{also[1]} failed: {exc}")
                if busy is not None:
                    busy.close()
                busy = None
        if len(held) < max_conns:
            ep = next(targets)
            try:
                held.append(handshake(ep, n, app))
                common.status(app, f"opened {ep[0]}:{ep[1]} holding={len(held)}")
            except OSError as exc:
                common.status(app, f"connect to {ep[0]}:{ep[1]} failed: {exc}")
        if common.sleep_until_stopped(interval_ms / 1000):
            break
    if busy is not None:
        busy.close()
    common.status(app, f"exiting with {len(held)} leaked sockets")


def churn(app: str, endpoints: list[tuple[str, int]], interval_ms: int, hold_ms: int) -> None:
    targets = itertools.cycle(endpoints)
    open_: collections.deque[tuple[float, socket.socket]] = collections.deque()
    done = failed = 0
    for n in itertools.count():
        if common.STOP.is_set():
            break
        now = time.monotonic()
        while open_ and open_[0][0] <= now:
            open_.popleft()[1].close()  # this side closes first: TIME_WAIT stays here
        try:
            open_.append((now + hold_ms / 1000, handshake(next(targets), n, app)))
            done += 1
        except OSError:
            failed += 1
        if n % 200 == 0:
            common.status(app, f"connections={done} failed={failed}")
        if common.sleep_until_stopped(interval_ms / 1000):
            break
    for _, sock in open_:
        sock.close()
    common.status(app, f"exiting connections={done} failed={failed}")


def main(argv: list[str] | None = None) -> int:
    p = common.base_parser(__doc__ or "", ("close-wait-leak", "churn"))
    p.add_argument("--max-connections", type=int, default=10, help="close-wait-leak")
    p.add_argument("--hold-ms", type=int, default=1500, help="churn: lifetime of a connection")
    p.add_argument("--also", help="close-wait-leak: host:port of a broker kept busy")
    args = p.parse_args(argv)
    common.install_signal_handlers()
    endpoints = parse_endpoints(args.bootstrap)
    if args.mode == "close-wait-leak":
        also = parse_endpoints(args.also)[0] if args.also else None
        leak(args.app, endpoints, args.interval_ms or 2000, args.max_connections, also)
    else:
        churn(
            args.app, endpoints, 100 if args.interval_ms is None else args.interval_ms, args.hold_ms
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

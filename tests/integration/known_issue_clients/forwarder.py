"""A TCP forwarder: ``127.0.0.1:LISTEN`` -> ``127.0.0.1:TARGET``, the network path a broker's
advertised address stands for (a load balancer, a NAT rule, a proxy).

    python forwarder.py LISTEN TARGET

Commands on stdin, each acknowledged on stdout once done: ``down`` closes the listening socket
(connects are refused) and every forwarded connection (both ends, as a lost path does);
``up`` listens again on the same port. Prints ``up`` at start. Exits at the end of stdin.
"""

import contextlib
import selectors
import socket
import sys
import threading

_lock = threading.Lock()
_conns: set[socket.socket] = set()


def _listen(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(128)
    return s


def _accept(listener: socket.socket, target: int) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:  # closed by "down"
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", target), timeout=5)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        with _lock:
            _conns.update((client, upstream))
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()


def _pipe(a: socket.socket, b: socket.socket) -> None:
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ, b)
    sel.register(b, selectors.EVENT_READ, a)
    try:
        while True:
            for key, _ in sel.select():
                data = key.fileobj.recv(65536)
                if not data:
                    return
                key.data.sendall(data)
    except OSError:
        pass
    finally:
        sel.close()
        with _lock:
            _conns.difference_update((a, b))
        for s in (a, b):
            s.close()


def _drop_all() -> None:
    with _lock:
        conns = list(_conns)
    for s in conns:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


def main() -> None:
    port, target = int(sys.argv[1]), int(sys.argv[2])
    listener = _listen(port)
    threading.Thread(target=_accept, args=(listener, target), daemon=True).start()
    print("up", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "down" and listener is not None:
            # shutdown() wakes the accepting thread at once; close() alone would leave the
            # socket listening until that thread's accept() returned with one more connection.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
            listener = None
            _drop_all()
        elif cmd == "up" and listener is None:
            listener = _listen(port)
            threading.Thread(target=_accept, args=(listener, target), daemon=True).start()
        print(cmd, flush=True)
    _drop_all()


if __name__ == "__main__":
    main()

"""The socket record every collector yields (netlink or /proc)."""

from __future__ import annotations

from dataclasses import dataclass, field

# Linux TCP state numbers used by the agent (include/net/tcp_states.h).
ESTABLISHED = 1
SYN_SENT = 2
SYN_RECV = 3
FIN_WAIT1 = 4
FIN_WAIT2 = 5
TIME_WAIT = 6
CLOSE = 7
CLOSE_WAIT = 8
LAST_ACK = 9
LISTEN = 10
CLOSING = 11
NEW_SYN_RECV = 12


@dataclass(slots=True)
class SocketRecord:
    """One TCP socket as the kernel reports it. Times in ms, None when the collector lacks them.

    ``key`` is computed once: set ``netns`` before reading it.
    """

    family: int
    state: int
    src: str
    sport: int
    dst: str
    dport: int
    inode: int
    uid: int
    idle_ms: int | None = None
    last_send_ms: int | None = None
    last_recv_ms: int | None = None
    bytes_acked: int | None = None
    bytes_received: int | None = None
    rtt_us: int | None = None
    # Time since the last ACK from the peer. In CLOSE_WAIT the peer's FIN was the last segment
    # it sent, so this is how long the socket has been in CLOSE_WAIT, even at first sight.
    last_ack_recv_ms: int | None = None
    # Network namespace inode (0: the agent's own, when it scans only that one). Two pods may
    # hold sockets with the same 4-tuple; the namespace keeps them apart.
    netns: int = 0
    _key: tuple[int, str, int, str, int] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def key(self) -> tuple[int, str, int, str, int]:
        """What identifies a socket between scans: namespace and 4-tuple."""
        k = self._key
        if k is None:
            k = self._key = (self.netns, self.src, self.sport, self.dst, self.dport)
        return k

    @property
    def conn(self) -> str:
        """'laddr:lport->raddr:rport' with IPv6 addresses in brackets."""
        return f"{_hp(self.src, self.sport)}->{_hp(self.dst, self.dport)}"


def _hp(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"

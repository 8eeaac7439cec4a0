"""connection_storm: connection attempts or short-lived connections per minute far above normal.

A broken broker, a failed authentication or a closed listener with short reconnect backoffs
makes a client reconnect many times a second: SYN_SENT sockets, short lifetimes, and refused or
timed-out connects that leave no socket at all (the host's TCP AttemptFails counter). A process
that creates a new Kafka client for every request looks alike, except that its connections
succeed and it closes them itself. The recommendation follows which of these the window shows
(``cause``).

A burst of re-opens right after an outage is the clients recovering, not a new fault: when the
client's process was paused in this window or the one before (it runs again and re-opens what
the broker closed meanwhile), or the broker dropped or refused its connections in the window
before (most connects failed, or it dropped busy connections) and now accepts them
(``recovering``). Such a window gives an ``info`` finding labelled
recovery; a storm that outlasts it is judged by its cause again, and so is one that was
already storming before the pause or the outage.
"""

from __future__ import annotations

from collections.abc import Sequence

from streaming.detectors.advice import RAISE_BACKOFF
from streaming.detectors.config import DetectorConfig
from streaming.schema.aggregates import HOST_SERIES, Aggregate
from streaming.schema.findings import Finding

KIND = "connection_storm"
# Evidence whose doubling or halving is news (docs/findings.md, "When a record is written").
RATES = (
    "opens_per_min",
    "short_lived_per_min",
    "connects_failed_per_min",
    "host_attempt_fails_per_min",
)
HEADLINE = (*RATES, "syn_sent_count")


# What a rate is made of: counts over the series' last ``window_s`` of event time (``span``).
COUNTED = (
    "opens",
    "short_lived",
    "connects_failed",
    "connects_refused",
    "closes_local",
    "closes_peer",
    "closes_unknown",
)


def span(agg: Aggregate, history: Sequence[Aggregate] = ()) -> dict[str, float]:
    """``COUNTED`` over the last ``window_s`` of event time, ending at the series' newest event:
    this window so far plus the part of the window before it that the span still covers, whose
    counts are taken as spread evenly over it. A rate over this span neither restarts from zero
    when a window opens nor extrapolates from a window's first seconds; a burst counts once."""
    counts = {name: float(getattr(agg, name)) for name in COUNTED}
    share = _previous_share(agg)
    prev = _window_before(agg, agg, history) if share > 0 else None
    if prev is not None:
        for name in COUNTED:
            counts[name] += share * getattr(prev, name)
    return counts


def _connects(w: Aggregate) -> bool:
    """Whether a window of a series counts anything a client-side storm's checks rate."""
    return bool(w.opens or w.short_lived or w.syn_sent_count)


def _window_before(agg: Aggregate, w: Aggregate, history: Sequence[Aggregate]) -> Aggregate | None:
    """The window of ``agg``'s series just before window ``w``, if the history has it."""
    return next(
        (h for h in reversed(history) if h.window_end == w.window_start and h.same_series(agg)),
        None,
    )


def _previous_share(agg: Aggregate) -> float:
    """The share of the window before ``agg``'s that its span still covers: none once the
    series' newest event reached the window's end (or when that time is unknown)."""
    return 1.0 - agg.covered_s() / agg.window_s if agg.window_s > 0 else 0.0


def rates(agg: Aggregate, history: Sequence[Aggregate] = ()) -> dict[str, float | None]:
    """Per-minute rates over the series' last ``window_s`` of event time (``span``)."""
    return _rates(span(agg, history), agg)


def _rates(counts: dict[str, float], agg: Aggregate) -> dict[str, float | None]:
    per_min = 60.0 / agg.window_s if agg.window_s > 0 else 1.0
    return {
        "opens_per_min": counts["opens"] * per_min,
        "short_lived_per_min": counts["short_lived"] * per_min,
        "connects_failed_per_min": counts["connects_failed"] * per_min,
        "host_attempt_fails_per_min": agg.host_attempt_fails_per_min,
    }


# What the evidence says about a client-side storm, in the order it is checked.
REFUSED = "refused"  # connects are refused: nothing listens on the broker's address
FAILED = "failed"  # connects fail otherwise: no answer, unreachable, or the client gives up
UNANSWERED = "unanswered"  # connects pile up in SYN_SENT: nothing answers them
CLIENT_CLOSES = "client_closes"  # connections succeed and the client closes them at once
PEER_CLOSES = "peer_closes"  # connections succeed and the broker closes them at once
UNKNOWN = "unknown"
# Share of the window's closes one side must have made to say who closes.
_MOSTLY = 2 / 3


def cause(agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()) -> str:
    """Why a client x broker pair churns: failed connects (seen with the eBPF collector), the
    window's SYN_SENT count, who closed; counts over the series' last window of event time
    (``span``), so the cause does not change because a window just opened."""
    return _cause(span(agg, history), agg.syn_sent_count, cfg)


def _cause(c: dict[str, float], syn_sent_count: int, cfg: DetectorConfig) -> str:
    closes = c["closes_local"] + c["closes_peer"] + c["closes_unknown"]
    if closes and c["connects_failed"] >= _MOSTLY * closes:
        return REFUSED if c["connects_refused"] >= _MOSTLY * c["connects_failed"] else FAILED
    if syn_sent_count >= cfg.storm_syn_sent_count:
        return UNANSWERED
    if closes and c["short_lived"]:
        if c["closes_local"] >= _MOSTLY * closes:
            return CLIENT_CLOSES
        if c["closes_peer"] >= _MOSTLY * closes:
            return PEER_CLOSES
    return UNKNOWN


# Why a burst is recovery (``recovering``).
RESUMED = "resumed"  # the client's process was paused in this window or the one before
BROKER_BACK = "broker_back"  # the broker dropped or refused connections, and accepts them now
_FAILING = (REFUSED, FAILED, UNANSWERED)


def recovering(
    agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate], why: str
) -> str | None:
    """``RESUMED`` or ``BROKER_BACK`` when a client-side burst follows a pause or an outage
    (this window, or the series' window just before it), else None. ``why`` is the window's
    ``cause``: connects that still mostly fail are no recovery yet. A series that already
    stormed in the window before the pause or the outage is not recovering from it: its storm
    goes on and is judged by its cause (a brief stall of the broker in the middle of a storm
    must not turn it into a recovery)."""
    prev = _window_before(agg, agg, history)
    if agg.paused_processes or (prev is not None and prev.paused_processes):
        back, signal = RESUMED, agg if agg.paused_processes else prev
    elif why in _FAILING:
        return None
    elif agg.closes_broker_drop or (prev is not None and _outage(prev, cfg)):
        back, signal = BROKER_BACK, agg if agg.closes_broker_drop else prev
    else:
        return None
    assert signal is not None
    already = _window_before(agg, signal, history)
    return None if already is not None and _stormed(already, cfg) else back


def _stormed(w: Aggregate, cfg: DetectorConfig) -> bool:
    """Window ``w`` of a series (an earlier, complete one) opened or cut short connections at
    a storm's rate, on its own counts: the same whether the history was restored or not."""
    r = _rates({name: float(getattr(w, name)) for name in COUNTED}, w)
    return (
        r["opens_per_min"] >= cfg.storm_opens_per_min
        or r["short_lived_per_min"] >= cfg.storm_short_lived_per_min
    )


def _outage(w: Aggregate, cfg: DetectorConfig) -> bool:
    """The broker was gone in window ``w``: it dropped busy connections, most connects failed
    (``opens`` counts the failed ones too), or connects piled up unanswered. A few failures
    among many connects are no outage: a client that churns through its ephemeral ports
    fails some of its own."""
    mostly_failed = w.connects_failed > 0 and w.connects_failed >= _MOSTLY * w.opens
    return (
        bool(w.closes_broker_drop)
        or mostly_failed
        or (w.syn_sent_count >= cfg.storm_syn_sent_count)
    )


_RECOVERY = {
    RESUMED: (
        "its process resumed from a pause ({how}) and re-opens the connections the broker "
        "closed meanwhile"
    ),
    BROKER_BACK: (
        "broker {broker} came back after dropping or refusing its connections, and the client "
        "re-opens them"
    ),
}
_RECOVERY_ADVICE = (
    "Recovery, not a new fault: a client re-opens every lost connection at once when it runs "
    "again or its broker returns. Nothing to change if the rate falls within a window or two; "
    "if it does not, this finding turns into a storm with its cause.{pause}"
)

_CLIENT_ADVICE = {
    REFUSED: (
        "Its connects are refused: nothing listens on the broker's address (the broker is "
        "down or restarting, or bootstrap.servers / the advertised listener names a wrong "
        "host or port). Bring the broker back or fix the address, and {backoff}."
    ),
    FAILED: (
        "Its connects fail without an answer (timeout, host or network unreachable, or the "
        "client's own connect timeout): the broker's address is unreachable from this host "
        "(firewall, routing, or an advertised listener this client cannot reach). Fix the path "
        "or the listener, and {backoff}."
    ),
    UNANSWERED: (
        "Its connects are not answered (SYN_SENT): the broker's address is unreachable from "
        "this host (broker down, firewall, or an advertised listener this client cannot "
        "route to). Fix the path or the listener, and {backoff}."
    ),
    CLIENT_CLOSES: (
        "Its connections succeed and it closes them itself within seconds: the application "
        "creates a Kafka client (producer, consumer or admin) per request or message and closes "
        "it afterwards. Create one client per process and reuse it; every new client pays a "
        "TCP (+TLS +SASL) handshake and a metadata fetch per broker."
    ),
    PEER_CLOSES: (
        "Its connections succeed and the broker closes them within seconds: look in the broker "
        "log for authentication failures (SASL/SSL), max.connections or "
        "max.connections.per.ip rejections, or a request the listener refuses (wrong "
        "security.protocol), fix that, and {backoff}."
    ),
    UNKNOWN: (
        "The client reconnects without backing off: find why connections fail (broker down "
        "or unreachable, wrong listener, SASL/SSL authentication errors in the client log) "
        "and {backoff}; with metadata.recovery.strategy=rebootstrap (Kafka 4.0 default) "
        "check that bootstrap.servers are reachable."
    ),
}


def detect(agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()) -> list[Finding]:
    """A finding when any of opens/min, short-lived/min, SYN_SENT or the host's failed connects
    per minute reaches its threshold; critical at ``storm_critical_factor`` times it."""
    host_level = agg.app == HOST_SERIES
    if not host_level and not _connects(agg) and not any(map(_connects, history)):
        return []  # every rate and SYN_SENT is 0 (most series): the answer without ``span``
    counts = span(agg, history)
    r = _rates(counts, agg)
    if host_level:
        # The host's failed-connect counter belongs to no socket, so it only ever speaks for the
        # host-level series; attached to every client x broker pair it would flag healthy ones.
        checks = {
            "host_attempt_fails_per_min": (
                r["host_attempt_fails_per_min"],
                cfg.storm_host_attempt_fails_per_min,
            )
        }
    else:
        checks = {
            "opens_per_min": (r["opens_per_min"], cfg.storm_opens_per_min),
            "short_lived_per_min": (r["short_lived_per_min"], cfg.storm_short_lived_per_min),
            "syn_sent_count": (float(agg.syn_sent_count), float(cfg.storm_syn_sent_count)),
        }
    hit = {name: v / t for name, (v, t) in checks.items() if v is not None and t > 0 and v >= t}
    if not hit:
        return []
    severity = "critical" if max(hit.values()) >= cfg.storm_critical_factor else "warning"
    if host_level:
        summary = (
            f"Outgoing TCP connects on {agg.host} fail {r['host_attempt_fails_per_min']:.0f} "
            "times/min (the host's AttemptFails counter: every process and every port, not "
            "only Kafka): something reconnects in a loop to an address that refuses or does "
            "not answer."
        )
        advice = (
            "A refused or timed-out connect leaves no socket, so the counter names no process "
            "and no broker: look for the process whose log repeats connection failures (a "
            "stopped broker, a wrong listener or bootstrap.servers entry, or a service other "
            f"than Kafka); if it is a Kafka client, {RAISE_BACKOFF}."
        )
    elif agg.side == "client":
        why = _cause(counts, agg.syn_sent_count, cfg)
        back = recovering(agg, cfg, history, why)
        if back is not None:
            severity = "info"
            summary = (
                f"{agg.app} on {agg.host} opens {r['opens_per_min']:.0f} connections/min to "
                f"broker {agg.broker}: "
                + _RECOVERY[back].format(how=agg.paused_how or "paused", broker=agg.broker)
                + "."
            )
            advice = _RECOVERY_ADVICE.format(
                pause=" Find what paused the process." if back == RESUMED else ""
            )
        else:
            failing = (
                f", {r['connects_failed_per_min']:.0f}/min fail"
                + (" (refused)" if why == REFUSED else "")
                if counts["connects_failed"]
                else ""
            )
            summary = (
                f"{agg.app} on {agg.host} opens {r['opens_per_min']:.0f} connections/min to "
                f"broker {agg.broker} ({r['short_lived_per_min']:.0f}/min short-lived{failing}, "
                f"{agg.syn_sent_count} in SYN_SENT): "
                + ("a new client per request." if why == CLIENT_CLOSES else "a reconnect storm.")
            )
            advice = _CLIENT_ADVICE[why].format(backoff=RAISE_BACKOFF)
    else:
        summary = (
            f"Broker {agg.broker} on {agg.host} accepts {r['opens_per_min']:.0f} connections/min "
            f"from {agg.peer_host} ({r['short_lived_per_min']:.0f}/min short-lived): a "
            "reconnect storm."
        )
        advice = (
            f"Clients on {agg.peer_host} reconnect in a loop: check the broker log for "
            "authentication failures, max.connections(.per.ip) rejections or a wrong listener, "
            f"and have the clients {RAISE_BACKOFF}."
        )
    evidence = {
        **{k: v for k, v in r.items()},
        "syn_sent_count": agg.syn_sent_count,
        "lifetime_avg_s": agg.lifetime_avg_s,
        "closes_local": round(counts["closes_local"]),
        "closes_peer": round(counts["closes_peer"]),
        # Which thresholds were crossed, as multiples of the threshold (evidence is numbers).
        **{f"{name}_x_threshold": round(ratio, 2) for name, ratio in sorted(hit.items())},
    }
    return [Finding.for_series(agg, KIND, severity, summary, advice, evidence)]

"""A librdkafka client (confluent-kafka, whichever release is on ``sys.path``) that checks its
cluster every half second, as a readiness probe does: ``Producer.list_topics()`` and nothing
else, so it needs a connection to one broker only, whichever librdkafka picks for it.

    python rdkafka_probe.py BOOTSTRAP --app NAME

Prints the confluent-kafka and librdkafka versions, then ``ready`` after the first metadata it
got, then one line per answer that changed (``metadata`` or ``no metadata: <error>``); runs
until killed. ``--app`` is a marker in argv for the agent's app rules.
"""

import sys
import time

from confluent_kafka import KafkaException, Producer, libversion, version


def main() -> None:
    bootstrap = sys.argv[1]
    print(f"confluent-kafka {version()[0]}, librdkafka {libversion()[0]}", flush=True)
    producer = Producer({"bootstrap.servers": bootstrap})
    ready = False
    last = None
    while True:
        try:
            producer.list_topics(timeout=1.0)
            now = "metadata"
        except KafkaException as e:
            now = f"no metadata: {e.args[0].str() if e.args else e}"
        if not ready and now == "metadata":
            print("ready", flush=True)
            ready = True
        if now != last:
            print(now, flush=True)
            last = now
        producer.poll(0)
        time.sleep(0.5)


if __name__ == "__main__":
    main()

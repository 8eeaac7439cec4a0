import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Scenario workloads with the real Java Kafka client (org.apache.kafka:kafka-clients).
 *
 * <pre>
 * java ConnmonDriver --mode MODE --app NAME --bootstrap HOST:PORT[,..] --topic T
 *                    [--group G] [--interval-ms N] [--poll-for-s N] [--prop key=value]...
 * </pre>
 *
 * Modes: producer (one message every interval, default 200 ms), idle-producer (the same with a
 * long interval, default 30 s), consumer (classic group protocol, polls continuously),
 * stalled-consumer (polls for --poll-for-s seconds, then never calls poll() again but stays
 * alive). --app is only a marker in argv so that monitors can tell processes apart. Runs until
 * SIGTERM; prints one status line per event to stdout.
 */
public final class ConnmonDriver {
    private static final AtomicBoolean RUNNING = new AtomicBoolean(true);
    private static final CountDownLatch DONE = new CountDownLatch(1);

    private ConnmonDriver() {}

    public static void main(String[] argv) throws Exception {
        String mode = null, app = null, bootstrap = null, topic = null, group = null;
        long intervalMs = -1;
        long pollForS = 20;
        Properties props = new Properties();
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            String v = i + 1 < argv.length ? argv[i + 1] : null;
            switch (a) {
                case "--mode": mode = v; i++; break;
                case "--app": app = v; i++; break;
                case "--bootstrap": bootstrap = v; i++; break;
                case "--topic": topic = v; i++; break;
                case "--group": group = v; i++; break;
                case "--interval-ms": intervalMs = Long.parseLong(v); i++; break;
                case "--poll-for-s": pollForS = Long.parseLong(v); i++; break;
                case "--prop": {
                    int eq = v == null ? -1 : v.indexOf('=');
                    if (eq <= 0) {
                        fail("--prop " + v + ": expected key=value");
                    }
                    props.setProperty(v.substring(0, eq), v.substring(eq + 1));
                    i++;
                    break;
                }
                default: fail("unknown argument " + a);
            }
        }
        if (mode == null || app == null || bootstrap == null || topic == null) {
            fail("--mode, --app, --bootstrap and --topic are required");
        }
        props.setProperty("bootstrap.servers", bootstrap);
        props.putIfAbsent("client.id", app);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            RUNNING.set(false);
            try {
                DONE.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        try {
            switch (mode) {
                case "producer": produce(props, topic, intervalMs < 0 ? 200 : intervalMs); break;
                case "idle-producer": produce(props, topic, intervalMs < 0 ? 30000 : intervalMs); break;
                case "consumer": consume(props, topic, group == null ? app : group, -1); break;
                case "stalled-consumer":
                    consume(props, topic, group == null ? app : group, pollForS);
                    break;
                default: fail("unknown --mode " + mode);
            }
        } finally {
            DONE.countDown();
        }
    }

    private static void fail(String message) {
        System.err.println("connmon-java-driver: " + message);
        System.exit(2);
    }

    private static void status(String what) {
        System.out.println(Instant.now() + " " + what);
        System.out.flush();
    }

    private static void produce(Properties props, String topic, long intervalMs)
            throws InterruptedException {
        props.putIfAbsent("key.serializer", StringSerializer.class.getName());
        props.putIfAbsent("value.serializer", StringSerializer.class.getName());
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            status("producer started");
            long n = 0;
            while (RUNNING.get()) {
                String value = "m-" + n++;
                producer.send(new ProducerRecord<>(topic, value, value), (md, err) -> {
                    if (err == null) {
                        acked.incrementAndGet();
                    } else if (failed.incrementAndGet() % 100 == 1) {
                        status("send failed: " + err);
                    }
                });
                if (intervalMs >= 1000) {
                    status("sent " + value + " acked=" + acked.get() + " failed=" + failed.get());
                }
                sleepWhileRunning(intervalMs);
            }
            producer.close(Duration.ofSeconds(5));
        }
        status("producer closed acked=" + acked.get() + " failed=" + failed.get());
    }

    private static void consume(Properties props, String topic, String group, long pollForS)
            throws InterruptedException {
        props.putIfAbsent("key.deserializer", StringDeserializer.class.getName());
        props.putIfAbsent("value.deserializer", StringDeserializer.class.getName());
        props.putIfAbsent("group.id", group);
        props.putIfAbsent("group.protocol", "classic");
        props.putIfAbsent("auto.offset.reset", "earliest");
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props);
        consumer.subscribe(List.of(topic));
        status("consumer subscribed group=" + group);
        long stopPollingAt = pollForS < 0 ? Long.MAX_VALUE
                : System.nanoTime() + TimeUnit.SECONDS.toNanos(pollForS);
        long records = 0;
        while (RUNNING.get() && System.nanoTime() < stopPollingAt) {
            ConsumerRecords<String, String> got = consumer.poll(Duration.ofMillis(500));
            records += got.count();
        }
        if (RUNNING.get()) {
            // The stalled consumer: alive, sockets open, but nobody drives the network client.
            status("stopped polling after " + records + " records; sleeping");
            while (RUNNING.get()) {
                Thread.sleep(200);
            }
        }
        consumer.close(Duration.ofSeconds(5));
        status("consumer closed records=" + records);
    }

    private static void sleepWhileRunning(long ms) throws InterruptedException {
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        while (RUNNING.get() && System.nanoTime() < end) {
            Thread.sleep(Math.min(100, Math.max(1, (end - System.nanoTime()) / 1_000_000)));
        }
    }
}

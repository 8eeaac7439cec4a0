import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A Java Kafka client (org.apache.kafka:kafka-clients, whichever release is on the class path)
 * that keeps asking for a topic's metadata, as a producer does before its first send.
 *
 * <pre>
 * java KnownIssueClient --app NAME --bootstrap HOST:PORT --topic T
 * </pre>
 *
 * Only the API every release since 0.11 has. --app is a marker in argv for the agent's app
 * rules. Prints "ready" once the producer exists, then runs until killed.
 */
public final class KnownIssueClient {
    private KnownIssueClient() {}

    public static void main(String[] argv) throws Exception {
        String app = null, bootstrap = null, topic = null;
        for (int i = 0; i + 1 < argv.length; i += 2) {
            switch (argv[i]) {
                case "--app": app = argv[i + 1]; break;
                case "--bootstrap": bootstrap = argv[i + 1]; break;
                case "--topic": topic = argv[i + 1]; break;
                default: throw new IllegalArgumentException("unknown argument " + argv[i]);
            }
        }
        if (app == null || bootstrap == null || topic == null) {
            throw new IllegalArgumentException("--app, --bootstrap and --topic are required");
        }
        Properties props = new Properties();
        props.setProperty("bootstrap.servers", bootstrap);
        props.setProperty("client.id", app);
        // partitionsFor() gives up after this long without metadata; the loop asks again.
        props.setProperty("max.block.ms", "1000");
        // Every other setting keeps its default: reconnect.backoff.ms 50,
        // reconnect.backoff.max.ms 1000.
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            System.out.println("ready");
            System.out.flush();
            while (true) {
                try {
                    producer.partitionsFor(topic);
                } catch (RuntimeException e) {
                    // No metadata in max.block.ms: the listener did not answer the client.
                }
                Thread.sleep(100);
            }
        }
    }
}

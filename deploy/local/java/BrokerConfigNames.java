// Prints every broker configuration name this Kafka version knows, one per line. connmon runs it
// (java single-file source mode) so an unknown broker override fails before a broker starts.
public class BrokerConfigNames {
    public static void main(String[] args) {
        for (String name : org.apache.kafka.server.config.AbstractKafkaConfig.CONFIG_DEF.names()) {
            System.out.println(name);
        }
    }
}

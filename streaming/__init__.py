"""connmon: a monitor for the TCP connections between Kafka clients and Kafka brokers."""

__version__ = "0.1.0"

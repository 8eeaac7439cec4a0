"""connmon agent: per-socket TCP state from the kernel, attributed to processes and Kafka
brokers, tracked between scans and produced as events to Kafka."""

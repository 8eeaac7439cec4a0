"""End-to-end scenarios: real Kafka clients misbehaving on purpose, and the runner behind
``connmon demo`` and ``connmon scenario run``."""

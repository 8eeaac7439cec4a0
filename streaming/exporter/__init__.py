"""connmon exporter: serves the job's aggregates, findings and progress to Prometheus."""

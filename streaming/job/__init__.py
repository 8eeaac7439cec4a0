"""The Spark Structured Streaming job: events -> windows per series -> detectors -> findings."""

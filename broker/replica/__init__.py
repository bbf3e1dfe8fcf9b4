"""Kafka's replication on the broker: partition replicas, follower fetchers, ISR changes."""

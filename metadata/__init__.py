"""Cluster metadata on the quorum: records, images, replay, the controller."""

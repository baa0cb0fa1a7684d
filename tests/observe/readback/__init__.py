"""Tests of observe.readback: reading and following a stream."""

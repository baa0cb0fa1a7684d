"""Tests of observe.query: SQL over verified events."""

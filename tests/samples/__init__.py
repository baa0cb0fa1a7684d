"""Tests of samples/: the reference lane, the committed evidence and the worked tracker example."""

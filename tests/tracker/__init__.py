"""Tests of tracker: the progress database, its rules on both backends, its CLI and its site."""

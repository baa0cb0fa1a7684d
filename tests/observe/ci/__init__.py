"""Tests of observe.ci: CI systems, their annotations and files, and JUnit output."""

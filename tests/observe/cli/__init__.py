"""Tests of observe.cli: the command line's surface, options, exit codes and refusals."""

"""Helpers shared by the tests: paths, the subprocess runner and its environment, recordings, backends, browsers."""

"""The ``alpha`` command line: the only place click is imported."""

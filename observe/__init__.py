"""observe: the recorder and the ``alpha`` command line."""

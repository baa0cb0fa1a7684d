"""``alpha observe report``: one self-contained HTML page of a stream."""

"""``alpha observe query``: SQL (DuckDB) over the events of many streams."""

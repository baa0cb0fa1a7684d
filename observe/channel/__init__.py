"""The light channel client: receipts and steps inside a recording (standard library only; never pyarrow)."""

"""A recording's secrets: masking, where the values come from, which environment values are recorded."""

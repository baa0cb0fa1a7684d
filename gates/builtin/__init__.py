"""The built-in gates, written in the gate language (one TOML file each)."""

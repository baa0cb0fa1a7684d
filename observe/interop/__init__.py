"""Formats other tools read: in-toto/DSSE attestations, OTLP traces, asciicast."""

"""Tests of observe.secrets: masking, the environment allow-list and the mask sources."""

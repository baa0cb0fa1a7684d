"""Tests of observe.session: fleet sessions."""

"""Tests of observe.interop: attestations and exports to other formats."""

"""Tests of observe.channel: receipts and steps sent from inside a recording."""

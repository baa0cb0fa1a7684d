"""Tests of observe.recorder: what a recording captures, how it ends, and what the command cannot forge."""

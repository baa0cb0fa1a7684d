"""Tests of observe.devices: GPUs observed by the recorder, real and simulated."""

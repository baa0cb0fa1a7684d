"""Observing devices: what GPUs the recorder itself sees (NVML, simulated)."""

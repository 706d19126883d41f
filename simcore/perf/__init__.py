"""GPU step latency models (see simcore.perf.base for the interface)."""

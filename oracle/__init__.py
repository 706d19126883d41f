"""The fidelity oracle (not installed with the package): see docs/fidelity.md and ``python -m oracle --help``."""

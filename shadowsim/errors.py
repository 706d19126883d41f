"""Re-export of the one user-facing error type (defined in the pure core so simcore can raise it)."""
from simcore.errors import UserError

__all__ = ["UserError"]

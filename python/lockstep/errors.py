"""lockstep's errors as Python raises them: a bad argument or shape is a ValueError, a missing or
malformed file an OSError, a failed peer or replica a DistributedError (a RuntimeError)."""
from ._lockstep import DistributedError

__all__ = ["DistributedError"]

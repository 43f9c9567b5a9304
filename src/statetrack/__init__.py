"""statetrack: state tracking and length generalization in sequence models."""

from statetrack.errors import StatetrackError

__version__ = "0.1.0"

__all__ = ["StatetrackError", "__version__"]

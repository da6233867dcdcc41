"""A frame of the data that does not depend on the user's axes, as the estimator uses it: defined
in :mod:`kmtlib.analysis.frame` (plain numpy, shared with training)."""

from ..analysis.frame import DEGENERATE, SYMMETRIC, data_unit, frame_turns, principal_frame

__all__ = ["DEGENERATE", "SYMMETRIC", "data_unit", "frame_turns", "principal_frame"]

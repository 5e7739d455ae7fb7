"""The loops. Each is one screen of control flow over the engine and the parts."""

from .react import react
from .refine import refine
from .trials import trials

__all__ = ["react", "refine", "trials"]

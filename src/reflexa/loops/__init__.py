"""The loops. Each is one screen of control flow over the engine and the parts."""

from .refine import refine

__all__ = ["refine"]

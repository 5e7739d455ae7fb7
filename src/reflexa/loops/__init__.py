"""The loops. Each is one screen of control flow over the engine and the parts; `session` holds what
they share."""

from .plan import plan
from .react import react
from .refine import refine
from .research import research
from .session import Session
from .trials import trials

__all__ = ["Session", "plan", "react", "refine", "research", "trials"]

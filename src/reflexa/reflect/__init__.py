"""The reflection engine shared by every loop: gate, classify, experience, reflector, progress, governor."""

from .classify import Decision, Facts, Repair, classify
from .engine import Counters, Engine, Handling
from .experience import ExperienceLibrary
from .governor import Governor
from .workspace import Workspace

__all__ = ["Counters", "Decision", "Engine", "ExperienceLibrary", "Facts", "Governor", "Handling", "Repair",
           "Workspace", "classify"]

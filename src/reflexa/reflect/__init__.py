"""The reflection engine shared by every loop: gate, classify, experience, reflector, progress, governor, repair
policy."""

from .classify import Decision, Facts, Repair, classify
from .engine import Counters, Engine, Handling
from .experience import ExperienceLibrary
from .governor import Governor
from .repairs import RepairPolicy
from .workspace import Workspace

__all__ = ["Counters", "Decision", "Engine", "ExperienceLibrary", "Facts", "Governor", "Handling", "Repair",
           "RepairPolicy", "Workspace", "classify"]

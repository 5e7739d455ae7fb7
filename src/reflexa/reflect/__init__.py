"""The reflection engine shared by every loop: gate, classify, experience, reflector, progress, governor, repair
policy."""

from .classify import Facts, Repair, Route, classify
from .engine import Counters, Engine, Handling
from .experience import ExperienceLibrary
from .governor import Governor
from .repairs import RepairPolicy
from .workspace import Workspace

__all__ = ["Counters", "Engine", "ExperienceLibrary", "Facts", "Governor", "Handling", "Repair", "Route",
           "RepairPolicy", "Workspace", "classify"]

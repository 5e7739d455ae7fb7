"""Model backends behind one seam. Heavy SDKs are imported only when their backend is built.

Backends register through the `reflexa.models` entry-point group (see `registry`); a third-party package
adds one with a `Backend` object, without editing reflexa.
"""

from .base import Completion, Generation, Model
from .registry import Availability, Backend
from .scripted import ScriptedModel
from .spec import availability, resolve

__all__ = ["Availability", "Backend", "Completion", "Generation", "Model", "ScriptedModel", "availability", "resolve"]

"""Model backends behind one seam. Heavy SDKs are imported only when their backend is built."""

from .base import Completion, Generation, Model
from .scripted import ScriptedModel
from .spec import availability, resolve

__all__ = ["Completion", "Generation", "Model", "ScriptedModel", "availability", "resolve"]

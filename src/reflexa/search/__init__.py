"""Search backends behind one seam, distillation, and the search cache."""

from .base import Evidence, SearchBackend, SearchError, SearchOutcome
from .cache import SearchCache
from .corpus import LocalCorpus
from .distill import distill

__all__ = ["Evidence", "LocalCorpus", "SearchBackend", "SearchCache", "SearchError", "SearchOutcome", "distill"]

"""Every kind of step a run stores, in one place: what each face (the CLI's `show` and live view, the web viewer)
renders through its one table of renderers, and what `Step.payload()` reads a stored step back into."""

from ..reflect.engine import Decided
from ..runtime import Checkpoint, ModelCall, Stop
from ..types import Payload
from .plan import PlanMade, PlanRejected, Propagated, UnitStatus
from .react import Acted
from .refine import Attempt, Checked, Flag, NoProgress, RepairChosen, Selected
from .research import Audited, Queries, Searched
from .trials import Trial

STEPS: tuple[type[Payload], ...] = (ModelCall, Checkpoint, Stop, Decided, Attempt, Checked, Flag, NoProgress,
                                    RepairChosen, Acted, Trial, Queries, Searched, Audited, PlanMade, PlanRejected,
                                    UnitStatus, Propagated, Selected)
"""The step kinds of every loop, the engine and the runtime."""

__all__ = ["STEPS", "Acted", "Attempt", "Audited", "Checked", "Checkpoint", "Decided", "Flag", "ModelCall",
           "NoProgress", "PlanMade", "PlanRejected", "Propagated", "Queries", "RepairChosen", "Searched", "Stop",
           "Selected", "Trial", "UnitStatus"]

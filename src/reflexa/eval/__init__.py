"""`reflexa eval`: strategies side by side on a dataset of tasks, scored by checks the loop does not see,
compared at equal cost with exact paired statistics (docs/eval.md)."""

from .dataset import EvalTask, Score, read_dataset
from .report import summarise
from .runner import run_eval
from .strategies import Strategy, parse_strategies

__all__ = ["EvalTask", "Score", "Strategy", "parse_strategies", "read_dataset", "run_eval",
           "summarise"]

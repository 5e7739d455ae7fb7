"""Tools for agents: the registry (validation, timeouts, caps, blocks, idempotent effects) and the SQL toolset."""

from .registry import Observation, Tool, ToolError, ToolRegistry, tool
from .sql import sql_tools

__all__ = ["Observation", "Tool", "ToolError", "ToolRegistry", "sql_tools", "tool"]

"""Tools for agents: the registry (a static set of tools), a per-run session (validation, timeouts, caps,
blocks, pages, idempotent effects) and the SQL toolset."""

from .registry import Observation, Tool, ToolError, ToolRegistry, ToolSession, tool
from .sql import sql_tools

__all__ = ["Observation", "Tool", "ToolError", "ToolRegistry", "ToolSession", "sql_tools", "tool"]

"""The package's version, in a module of its own so that any layer can read it without importing the package's
front door (`reflexa/__init__.py`), which sits above every layer."""

__version__ = "0.1.0"

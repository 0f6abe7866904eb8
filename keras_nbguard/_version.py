"""The package's version: read by hatch at build time, and by ``%nbguard status``."""

__version__ = "0.1.0"

"""The one version string of the distribution, read by packaging and both daemons."""

__version__ = "0.1.0"

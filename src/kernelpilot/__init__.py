"""kernelpilot: what a GPU kernel engineer works with, for agents and the engineers who direct them."""

__version__ = "0.1.0"

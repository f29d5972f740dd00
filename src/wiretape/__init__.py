"""wiretape: record an AI agent's provider traffic from outside the agent and
replay it offline, with a verdict made of numbers."""

__version__ = "0.1.0"

__all__ = ["__version__"]

"""inferd: a self-hosted, OpenAI-compatible inference API."""

__version__ = "0.1.0"

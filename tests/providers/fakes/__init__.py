"""Local test doubles of the vendors' wire formats (servers on 127.0.0.1 only)."""

from .server import FakeServer, Recorded, Respond, Stream, sse

__all__ = ["FakeServer", "Recorded", "Respond", "Stream", "sse"]

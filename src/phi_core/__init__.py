"""phi-core: evaluational parallelism for LLM agents."""

__version__ = "0.1.0"

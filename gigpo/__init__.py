"""gigpo: group-in-group policy optimisation for LLM agents in multi-step environments."""
__version__ = "0.1.0"

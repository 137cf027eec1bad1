"""LLM providers: gemini, offline, replay."""

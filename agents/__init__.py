"""Agent services: planner, implementer, fixer, test synthesiser, executor, autotuner, profiler, verifier."""

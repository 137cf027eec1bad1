"""What agents call: tasks, test synthesis, compile check, verification, sandbox, timing, cost model, profiling, autotuning."""

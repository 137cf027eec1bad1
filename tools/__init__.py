"""The evaluator, grouped by trust boundary; agents call it through `tools.api`.

`inputs` (user files, read in the parent), `correctness` (frozen suite, comparison),
`verification` (pipeline, verdict, receipts), `sandbox` (launcher, cgroups, wire format),
`child` (the only code that imports candidate code), `lowered` (reading the lowered
program, audit, compile check), `performance` (chips, cost models, executors, profile,
autotune) and `jaxprivate` (every use of JAX's private modules).
"""

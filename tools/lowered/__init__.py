"""Reading a lowered program without the candidate's code: the Mosaic reader (types,
scalar evaluation, kernel record, op helpers, parsing, body reading), the firing audit and
the compile check with its VMEM budget.

May import `tools.jaxprivate` (MLIR bindings), `tools.performance.chips`,
`tools.performance.llo_cycles` (the compiler's bundle schedules, read) and numpy; never
`tools.child`. The compile check's lowering helpers are also used by the child.
"""

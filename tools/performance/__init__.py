"""How fast a candidate is: chip figures, the analytic roofline of a kernel and the model of
the XLA baseline, the executors (simulated and real), the device-timing wire types, the
profile and the autotuner.

May import `tools.lowered`, `tools.sandbox`, `tools.inputs` and, for the autotuner,
`tools.verification`; never `tools.child` (the real executor starts `tools.child.timing`
by module name).
"""

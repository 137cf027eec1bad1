"""The verifier: the pipeline that turns one candidate, task and target into a verdict,
the verdict itself, and the sealed receipt that lets anyone re-derive it.

May import every parent-side package (inputs, correctness, sandbox, lowered, performance);
it runs the child only through `tools.sandbox` by module name and never imports
`tools.child`.
"""

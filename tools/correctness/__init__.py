"""What "correct" means: the frozen test suite (inputs, float64 oracle, error floor, built
and hashed before any candidate runs) and the comparison of a candidate's outputs against it.

May import `tools.inputs` and the sandbox's wire format (`tools.sandbox.wire`, for arrays);
never `tools.child`.
"""

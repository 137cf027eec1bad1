"""The user's files, read in the parent: task files (and JAXBench `baseline.py`), candidate
files read statically with `ast` (never imported), and the file-problem errors both raise.

Task files are trusted and imported here; candidate files are not. May import the standard
library, numpy, JAX and `kernelgraph.errors`; never `tools.child`, the sandbox or anything
that runs a candidate.
"""

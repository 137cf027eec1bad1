"""kernelgraph's own notes on writing Pallas TPU kernels, indexed by `tools.knowledge`.

Each `*.md` file here is one note: a kernel class (how such kernels are usually structured)
or a lever (one thing a plan can change, and what it tends to do). Front matter says what
the note is about (`kind: note`, `kernel_classes: [...]`, `levers: [...]`); every `## `
section becomes one retrievable document. This package holds data only.
"""

"""The `offline` provider: a deterministic kernel author that needs no language model.

Layout: `classify` (kernel class from the jaxpr), `jaxpr_source` (a jaxpr written out as
standalone code), one writer per kernel class (`rows`: elementwise, row-wise, row-generic
and single-block; `matmul`: matmul with a fused epilogue; `attention`: flash attention),
`planner` (levers from the parent's profile), `author` (candidates and the fixer's ladder),
`inputs` (`make_inputs` from a signature) and `provider` (the `Provider` itself).

The matmul, attention and row writers keep their schedule as a frozen spec (`MatmulSpec`,
`AttentionSpec`, `RowsSpec`) rendered by one function each; `levers` is the registry of
catalogue levers (`knowledge/levers.md` ids) as `spec -> [spec, ...] | NotApplicable`, with
the per-class transformations in `matmul_levers`, `attention_levers` and `rows_levers`;
`variety` picks the spec an expansion writes from the hint and the seed.
"""

from __future__ import annotations

from agents.llm.offline.provider import OfflineProvider

__all__ = ["OfflineProvider"]

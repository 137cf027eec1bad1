"""The child side: the only code that imports candidate code. `worker` (the evaluation
child), `timing` (the device timing child), `loader` (imports a candidate and calls its
`build`) and `interpret` (TPU interpret mode with poisoned memory and race detection;
`branches` counts the conditional sides each kernel run took).

Run only inside a sandboxed child, started by module name. It may import any parent-side
package; nothing outside `tools.child` may import it (tests/test_boundaries.py checks).
"""

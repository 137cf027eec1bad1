"""The boundary between the verifier and candidate code: the launcher that starts a child as
`python -I -m MODULE BOX` under limits, the per-sandbox cgroup, and the wire format
(msgpack structs) that is all the two sides exchange.

Both sides import it, so it may import only the standard library, numpy, msgspec and its
own modules; never `tools.child` (a child is started by module name, not imported).
"""

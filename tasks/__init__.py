"""The shipped task suite: one reference JAX function per file."""

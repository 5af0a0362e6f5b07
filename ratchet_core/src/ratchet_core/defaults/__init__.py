"""Default implementations of the SPIs that need no engine (retry, security, execution, cluster
identity, metrics no-op, logging)."""

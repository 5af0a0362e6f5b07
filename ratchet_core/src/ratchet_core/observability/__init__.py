"""What operators see of a running deployment: metrics, tracing, queued logging and health."""

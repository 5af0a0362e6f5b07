"""The features built on the store's capabilities: recurring jobs, workflows and signals, batches
and streaming batches, flow control (permits, rate limits) and retention."""

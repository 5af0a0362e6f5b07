"""The enqueue side: from a call to ``enqueue`` (or a builder, a batch, a workflow node, a recurring
firing) to the written row: the scheduler service, the one pipeline, the builders' options and the
targets' resolution."""

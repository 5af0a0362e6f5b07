"""The container and its configuration: the SPI bindings, priority-ordered alternatives and
their conformance checks, typed configuration, opening stores (and adapting older store SPI
versions) and a worker process's signal handling."""

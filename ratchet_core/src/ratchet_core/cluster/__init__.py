"""Cluster coordination: startup leases, wake-ups between nodes and the coordinator that
``cluster.backend`` selects.

``ratchet_core.cluster`` was a module before 0.3; its names are served from
:mod:`ratchet_core.cluster.coordination`.
"""

from ratchet_core._moved import forwarder

__getattr__ = forwarder("cluster", "coordination")

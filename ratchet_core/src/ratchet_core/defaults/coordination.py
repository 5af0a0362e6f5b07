"""The cluster-coordination SPIs' defaults, implemented in :mod:`ratchet_core.cluster`:
``ClusterCoordinator`` (:func:`create_cluster_coordinator`, the transport ``cluster.backend``
selects) and ``StartupCoordinator`` (:class:`StoreBackedStartupCoordinator`, leases through the
store's ``LockStore``). Node identity and tag affinity are in :mod:`ratchet_core.defaults.cluster`.

Every SPI default is importable as ``ratchet_core.defaults.<area>.<Name>`` (the table is in
``docs/overriding-an-spi.md``); this module names those whose code lives with the subsystem
that uses it."""

from __future__ import annotations

from ratchet_core.cluster.backend import create_cluster_coordinator
from ratchet_core.cluster.coordination import StoreBackedStartupCoordinator

__all__ = ["StoreBackedStartupCoordinator", "create_cluster_coordinator"]

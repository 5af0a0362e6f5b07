"""Every contract as a collectable test class; run with ``--ratchet-tck-fixture``::

    pytest --pyargs ratchet_tck.suite --ratchet-tck-fixture pkg.module:factory \\
        --ratchet-tck-report out/
"""

from ratchet_tck.registry import contract_test_classes

globals().update(contract_test_classes())

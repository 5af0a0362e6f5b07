"""The payload chain: how a job's values are serialized, limited, sealed (codec, envelope,
encryption, keys, rotation) and shown (masking, the readable detail view).

``ratchet_core.payload`` was a module before 0.3 (the stored text forms of an
invocation and a backoff policy); its names are served from :mod:`ratchet_core.payload.forms`.
"""

from ratchet_core._moved import forwarder

__getattr__ = forwarder("payload", "forms")

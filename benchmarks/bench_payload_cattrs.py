"""payload.py's hand-written JSON framing next to a private cattrs converter doing the same
(issue 15 asked for cattrs there): CPU microseconds per call, best of 5 rounds.

    .venv/bin/python benchmarks/bench_payload_cattrs.py

The converter variants are written here only; payload.py keeps the faster hand-written code
(figures in benchmarks/README.md, "Bulk enqueue (issue 15)").
"""

# ruff: noqa
# mypy: ignore-errors
import json, time
from datetime import timedelta
from typing import Any
from uuid import uuid4
import attrs, cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from ratchet_api.model import BackoffKind, BackoffPolicy, JobInvocation
from ratchet_core.payload.forms import (
    decode_invocation,
    encode_invocation,
    encode_backoff,
    decode_backoff,
    dumps_compact,
)


@attrs.frozen(kw_only=True)
class InvocationDoc:
    v: int
    module: str
    qualname: str
    static: bool = True
    signature: str = ""
    args: list[Any] = attrs.field(factory=list)
    kwargs: dict[str, Any] = attrs.field(factory=dict)


conv = cattrs.Converter(detailed_validation=False)


def strict(kind):
    def hook(value, _):
        if not isinstance(value, kind):
            raise TypeError(f"must be {kind.__name__}, got {type(value).__name__}")
        return value

    return hook


for k in (str, bool, int, list, dict):
    conv.register_structure_hook(k, strict(k))
conv.register_structure_hook_func(lambda t: t == list[Any], strict(list))
conv.register_structure_hook_func(lambda t: t == dict[str, Any], strict(dict))
conv.register_structure_hook(InvocationDoc, make_dict_structure_fn(InvocationDoc, conv))


def dec_c(text, job_id):
    doc = conv.structure(json.loads(text), InvocationDoc)
    return JobInvocation(
        module=doc.module,
        qualname=doc.qualname,
        static=doc.static,
        signature=doc.signature,
        args=tuple(doc.args),
        kwargs=doc.kwargs,
    )


def enc_c(inv):
    d = InvocationDoc(
        v=1,
        module=inv.module,
        qualname=inv.qualname,
        static=inv.static,
        signature=inv.signature,
        args=list(inv.args),
        kwargs=dict(inv.kwargs),
    )
    return dumps_compact(conv.unstructure(d))


inv = JobInvocation(
    module="tests.engine.targets", qualname="bulk_item", signature="(n: int)", args=(5,)
)
text = encode_invocation(inv)
assert enc_c(inv) == text and dec_c(text, None) == decode_invocation(text, None)
jid = uuid4()
N = 50000


def t(label, f):
    b = []
    for _ in range(5):
        a = time.process_time()
        for _ in range(N):
            f()
        b.append(time.process_time() - a)
    print(label, round(min(b) / N * 1e6, 2))


print("invocation (bulk_item(5)), us per call")
for _ in range(2):
    t("decode hand", lambda: decode_invocation(text, jid))
    t("decode cattrs", lambda: dec_c(text, jid))
    t("encode hand", lambda: encode_invocation(inv))
    t("encode cattrs", lambda: enc_c(inv))


@attrs.frozen(kw_only=True)
class BackoffDoc:
    v: int
    kind: BackoffKind
    initial_ms: float
    multiplier: float
    maximum_ms: float
    jitter: bool


bc = cattrs.Converter(detailed_validation=False)
bc.register_structure_hook(float, lambda v, _: float(v))
bc.register_structure_hook(bool, lambda v, _: bool(v))


def _ms(x):
    m = x.total_seconds() * 1000.0
    return int(m) if m.is_integer() else m


def benc(p):
    return dumps_compact(
        bc.unstructure(
            BackoffDoc(
                v=1,
                kind=p.kind,
                initial_ms=_ms(p.initial),
                multiplier=p.multiplier,
                maximum_ms=_ms(p.maximum),
                jitter=p.jitter,
            )
        )
    )


def bdec(text):
    d = bc.structure(json.loads(text), BackoffDoc)
    return BackoffPolicy(
        kind=d.kind,
        initial=timedelta(milliseconds=d.initial_ms),
        multiplier=d.multiplier,
        maximum=timedelta(milliseconds=d.maximum_ms),
        jitter=d.jitter,
    )


p = BackoffPolicy(
    kind=list(BackoffKind)[0],
    initial=timedelta(seconds=1),
    multiplier=2.0,
    maximum=timedelta(minutes=5),
    jitter=True,
)
bt = encode_backoff(p)
assert benc(p) == bt and bdec(bt) == decode_backoff(bt)
print("backoff policy, us per call")
for _ in range(2):
    t("backoff enc hand", lambda: encode_backoff(p))
    t("backoff enc cattrs", lambda: benc(p))
    t("backoff dec hand", lambda: decode_backoff(bt))
    t("backoff dec cattrs", lambda: bdec(bt))

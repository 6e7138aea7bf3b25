"""Root cause first: findings ordered by the registry's causal rank, consequences naming their cause."""
from __future__ import annotations

from core import symptoms
from core.models import Finding


def order(findings: list[Finding]) -> list[Finding]:
    """Hardware first, then software that crashes a rank, then the transport, then the collective that times out
    waiting for all of the above (core.symptoms: rank, causes). A finding one of whose possible causes is present
    names the most fundamental of them in `caused_by` and goes after every root cause."""
    present = {f.symptom for f in findings}
    for f in findings:
        if f.caused_by is None:
            f.caused_by = next((c for c in symptoms.causes(f.symptom) if c in present), None)
    return sorted(findings, key=lambda f: (f.caused_by is not None, symptoms.rank(f.symptom), f.first_line))

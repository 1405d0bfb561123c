"""Hypothesis strategy: random equation sets with shared tensors and shared subterms."""
from __future__ import annotations

from hypothesis import strategies as st

SPACES = ("i", "a", "x")


@st.composite
def equation_sets(draw, max_equations: int = 3, max_terms: int = 8, max_factors: int = 6):
    """(SeQuant text, extents). Tensor names encode their slot spaces, so equal names are
    equal blocks and the forest can share leaves and contractions between terms."""
    extents = {s: draw(st.integers(2, 7)) for s in SPACES}
    n_eq = draw(st.integers(1, max_equations))
    lines, counter = [], [0]

    def fresh(space: str) -> str:
        counter[0] += 1
        return f"{space}_{counter[0] + 10}"

    pools: dict[tuple, list[str]] = {}
    for e in range(n_eq):
        n_res = draw(st.integers(0, 3))
        result = [f"{draw(st.sampled_from(SPACES))}_{k + 1}" for k in range(n_res)]
        terms = []
        pool = pools.setdefault(tuple(result), [])
        for _ in range(draw(st.integers(1, max_terms))):
            if pool and draw(st.booleans()) and draw(st.booleans()):
                terms.append(draw(st.sampled_from(pool)))     # a shared subterm, reused
                continue
            n_f = draw(st.integers(2, max_factors))
            slots: list[list[str]] = [[] for _ in range(n_f)]
            for label in result:
                slots[draw(st.integers(0, n_f - 1))].append(label)
            for k in range(n_f - 1):                          # a spanning tree of dummies
                other = draw(st.integers(k + 1, n_f - 1))
                label = fresh(draw(st.sampled_from(SPACES)))
                slots[k].append(label)
                slots[other].append(label)
            for _ in range(draw(st.integers(0, 2))):          # extra loops of the network
                a, b = draw(st.lists(st.integers(0, n_f - 1), min_size=2, max_size=2,
                                     unique=True))
                label = fresh(draw(st.sampled_from(SPACES)))
                slots[a].append(label)
                slots[b].append(label)
            factors = []
            for labels in slots:
                labels = labels[:3] if len(labels) > 3 else labels
                factors.append(labels)
            used = [lab for labels in factors for lab in labels]
            if any(used.count(lab) != (1 if lab in result else 2) for lab in set(used)) or \
                    any(lab not in used for lab in result) or any(not f for f in factors):
                continue                                       # truncation broke the pattern
            text = " * ".join(
                f"T{''.join(l.split('_')[0] for l in labels)}{{{','.join(labels)}}}"
                for labels in factors)
            coeff = draw(st.sampled_from(["", "2 ", "-1/2 ", "3/4 "]))
            terms.append(coeff + text)
            pool.append(coeff + text)
        if not terms:
            continue
        lhs = f"R{e}{{{','.join(result)}}}" if result else f"E{e}"
        body = terms[0] + "".join(f" - {t[1:]}" if t.startswith("-") else f" + {t}"
                                  for t in terms[1:])
        lines.append(f"{lhs} = {body}")
    if not lines:
        lines.append("E0 = Ti{i_1} * Ti{i_1}")
    return "\n".join(lines), extents

"""Unrestricted (α/β) CCSD inputs and their spin-orbital assembly, for the oracle that the
spin-integrated residuals are the spin blocks of the spin-orbital residuals.

Per spin ``s``: ``f[s]`` the Fock matrix over that spin's active orbitals (occupied first)
and the chemists' integrals ``(pr|qs)``: ``eri["aa"]``, ``eri["ab"]`` (p, r α; q, s β),
``eri["bb"]``.  Spin orbitals are ordered occupied α, occupied β, virtual α, virtual β.
Everything here is built with NumPy from those arrays; nothing of the package's transform.
"""
from __future__ import annotations

import itertools

import numpy as np

#: The unrestricted spaces: (spin, occupied?) per space name.
SPACES = {"i": (0, True), "a": (0, False), "I": (1, True), "A": (1, False)}


class Unrestricted:
    """α/β arrays and amplitudes; ``no``/``nv`` are (α, β) pairs."""

    def __init__(self, f, eri, no, amplitudes):
        self.f, self.eri, self.no = f, eri, tuple(no)
        self.nv = tuple(f[s].shape[0] - no[s] for s in (0, 1))
        self.t = amplitudes

    @property
    def extents(self) -> dict[str, int]:
        return {"i": self.no[0], "a": self.nv[0], "I": self.no[1], "A": self.nv[1]}

    def _slice(self, space: str) -> slice:
        spin, occ = SPACES[space]
        return slice(0, self.no[spin]) if occ else slice(self.no[spin], None)

    def tensors(self) -> dict[str, dict]:
        """Every block of every unrestricted tensor, as space-tuple mappings."""
        phys = {k: v.transpose(0, 2, 1, 3) for k, v in self.eri.items()}   # <pq|rs>
        whole = {"fa": self.f[0], "fb": self.f[1], "gab": phys["ab"],
                 "gaa": phys["aa"] - phys["aa"].transpose(0, 1, 3, 2),
                 "gbb": phys["bb"] - phys["bb"].transpose(0, 1, 3, 2)}
        spins = {"fa": (0, 0), "fb": (1, 1), "gaa": (0,) * 4, "gbb": (1,) * 4,
                 "gab": (0, 1, 0, 1)}
        out: dict[str, dict] = {}
        for name, array in whole.items():
            choices = [[s for s, (sp, _) in SPACES.items() if sp == spin] for spin in spins[name]]
            out[name] = {spaces: np.ascontiguousarray(array[tuple(map(self._slice, spaces))])
                         for spaces in itertools.product(*choices)}
        keys = {"t1a": ("a", "i"), "t1b": ("A", "I"), "t2aa": ("a", "a", "i", "i"),
                "t2ab": ("a", "A", "i", "I"), "t2bb": ("A", "A", "I", "I")}
        out.update({name: {keys[name]: self.t[name]} for name in keys})
        return out

    # ------------------------------------------------------------ spin-orbital assembly
    def _so(self) -> dict[tuple[int, bool], np.ndarray]:
        """Spin-orbital positions of each spin's occupied / virtual orbitals."""
        noa, nob = self.no
        nva, nvb = self.nv
        no = noa + nob
        return {(0, True): np.arange(noa), (1, True): noa + np.arange(nob),
                (0, False): no + np.arange(nva), (1, False): no + nva + np.arange(nvb)}

    def positions(self) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
        """Per spin, the positions of its occupied orbitals among the spin-orbital occupied
        ones and of its virtual orbitals among the virtual ones."""
        pos, no = self._so(), sum(self.no)
        return ({s: pos[(s, True)] for s in (0, 1)},
                {s: pos[(s, False)] - no for s in (0, 1)})

    def _orbitals(self, spin: int) -> np.ndarray:
        pos = self._so()
        return np.concatenate([pos[(spin, True)], pos[(spin, False)]])

    def spin_orbital(self) -> dict[str, np.ndarray]:
        """``f``, ``g = <pq||rs>``, ``t1``, ``t2`` over spin orbitals (occupied first)."""
        no, nv = sum(self.no), sum(self.nv)
        n = no + nv
        f = np.zeros((n, n))
        coulomb = np.zeros((n,) * 4)                      # <pq|rs> = (pr|qs) δ δ
        for s in (0, 1):
            orb = self._orbitals(s)
            f[np.ix_(orb, orb)] = self.f[s]
        for s1, s2 in itertools.product((0, 1), repeat=2):
            key = "ab"[s1] + "ab"[s2]
            chem = self.eri[key] if key != "ba" else self.eri["ab"].transpose(2, 3, 0, 1)
            o1, o2 = self._orbitals(s1), self._orbitals(s2)
            coulomb[np.ix_(o1, o2, o1, o2)] = chem.transpose(0, 2, 1, 3)
        g = coulomb - coulomb.transpose(0, 1, 3, 2)
        occ, vir = self.positions()
        t1 = np.zeros((nv, no))
        t1[np.ix_(vir[0], occ[0])] = self.t["t1a"]
        t1[np.ix_(vir[1], occ[1])] = self.t["t1b"]
        t2 = np.zeros((nv, nv, no, no))
        va, vb, oa, ob = vir[0], vir[1], occ[0], occ[1]
        ab = self.t["t2ab"]
        t2[np.ix_(va, va, oa, oa)] = self.t["t2aa"]
        t2[np.ix_(vb, vb, ob, ob)] = self.t["t2bb"]
        t2[np.ix_(va, vb, oa, ob)] = ab
        t2[np.ix_(vb, va, ob, oa)] = ab.transpose(1, 0, 3, 2)
        t2[np.ix_(va, vb, ob, oa)] = -ab.transpose(0, 1, 3, 2)
        t2[np.ix_(vb, va, oa, ob)] = -ab.transpose(1, 0, 2, 3)
        return {"f": f, "g": g, "t1": t1, "t2": t2}

    def spin_orbital_tensors(self) -> tuple[dict, dict[str, int]]:
        """The spin-orbital arrays as the evaluator's inputs, and their extents."""
        a = self.spin_orbital()
        no = sum(self.no)
        sl = {"i": slice(0, no), "a": slice(no, None)}
        tensors = {name: {spaces: np.ascontiguousarray(a[name][tuple(sl[s] for s in spaces)])
                          for spaces in itertools.product("ia", repeat=a[name].ndim)}
                   for name in ("f", "g")}
        tensors["t1"] = {("a", "i"): a["t1"]}
        tensors["t2"] = {("a", "a", "i", "i"): a["t2"]}
        return tensors, {"i": no, "a": sum(self.nv)}

    def project(self, so: dict) -> dict[str, np.ndarray]:
        """The spin blocks of spin-orbital E, R1, R2: E, R1a, R1b, R2aa, R2ab, R2bb."""
        occ, vir = self.positions()
        r1, r2 = np.asarray(so["R1"]), np.asarray(so["R2"])
        out = {"E": np.asarray(so["E"])}
        for s, name in ((0, "a"), (1, "b")):
            out["R1" + name] = r1[np.ix_(vir[s], occ[s])]
        for s1, s2 in ((0, 0), (0, 1), (1, 1)):
            out["R2" + "ab"[s1] + "ab"[s2]] = r2[np.ix_(vir[s1], vir[s2], occ[s1], occ[s2])]
        return out


def random_amplitudes(rng: np.random.Generator, no, nv, scale: float = 0.1) -> dict:
    """t1a, t1b, t2aa, t2bb (antisymmetric in bra and in ket), t2ab, from ``rng``."""
    (noa, nob), (nva, nvb) = no, nv

    def anti(nvir, nocc):
        t = scale * rng.standard_normal((nvir, nvir, nocc, nocc))
        t = t - t.transpose(1, 0, 2, 3)
        return t - t.transpose(0, 1, 3, 2)

    return {"t1a": scale * rng.standard_normal((nva, noa)),
            "t1b": scale * rng.standard_normal((nvb, nob)),
            "t2aa": anti(nva, noa), "t2bb": anti(nvb, nob),
            "t2ab": scale * rng.standard_normal((nva, nvb, noa, nob))}


def random_unrestricted(seed: int, nao: int = 7, no=(3, 2)) -> Unrestricted:
    """Random real orbitals of each spin over a random 8-fold symmetric AO integral and a
    random symmetric one-electron matrix (a UHF-shaped problem without a molecule)."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((nao, nao))
    h = h + h.T
    chem = rng.standard_normal((nao,) * 4)
    for perm in [(1, 0, 2, 3), (0, 1, 3, 2), (2, 3, 0, 1)]:
        chem = chem + chem.transpose(perm)
    c = [np.linalg.qr(rng.standard_normal((nao, nao)))[0] for _ in (0, 1)]
    f = [c[s].T @ (h + 0.1 * s * np.eye(nao)) @ c[s] for s in (0, 1)]
    eri = {"aa": _mo(chem, c[0], c[0]), "ab": _mo(chem, c[0], c[1]), "bb": _mo(chem, c[1], c[1])}
    nv = (nao - no[0], nao - no[1])
    return Unrestricted(f, eri, no, random_amplitudes(rng, no, nv))


def _mo(chem: np.ndarray, c1: np.ndarray, c2: np.ndarray) -> np.ndarray:
    """``(pr|qs)`` with p, r over ``c1`` and q, s over ``c2``."""
    return np.einsum("PRQS,Pp,Rr,Qq,Ss->prqs", chem, c1, c1, c2, c2, optimize=True)


def spin_orbital_tensor(blocks: dict[int, np.ndarray], bra_pos, ket_pos) -> np.ndarray:
    """A rank-n antisymmetric spin-orbital tensor from its sorted spin blocks.

    ``blocks[k]``: the block with k α particles (α slots first in bra and ket);
    ``bra_pos[s]`` / ``ket_pos[s]``: positions of spin ``s``'s orbitals along the bra / ket
    axes. Every spin pattern is filled from its block by antisymmetry."""
    n = next(iter(blocks.values())).ndim // 2
    size = [sum(len(pos[s]) for s in (0, 1)) for pos in (bra_pos, ket_pos)]
    out = np.zeros([size[0]] * n + [size[1]] * n)
    for sb in itertools.product((0, 1), repeat=n):
        for sk in itertools.product((0, 1), repeat=n):
            if sorted(sb) != sorted(sk):
                continue
            pb = sorted(range(n), key=lambda c: sb[c])
            pk = sorted(range(n), key=lambda c: sk[c])
            sign = _sign(pb) * _sign(pk)
            block = blocks[n - sum(sb)]
            # block axis m is bra slot pb[m] (ket slot pk[m]); put slot c at axis c
            axes = [pb.index(c) for c in range(n)] + [n + pk.index(c) for c in range(n)]
            where = [bra_pos[s] for s in sb] + [ket_pos[s] for s in sk]
            out[np.ix_(*where)] = sign * block.transpose(axes)
    return out


def _sign(perm) -> int:
    sign, seen = 1, set()
    for start in range(len(perm)):
        k, length = start, 0
        while k not in seen:
            seen.add(k)
            k = perm[k]
            length += 1
        if length and length % 2 == 0:
            sign = -sign
    return sign


def antisymmetric_block(rng: np.random.Generator, nv, no, n_alpha: int, n: int,
                        scale: float = 0.1) -> np.ndarray:
    """A random amplitude block with ``n_alpha`` α particles of ``n``: antisymmetric within
    its α slots and within its β slots, bra and ket apart."""
    spins = [0] * n_alpha + [1] * (n - n_alpha)
    t = scale * rng.standard_normal([nv[s] for s in spins] + [no[s] for s in spins])
    for group in (range(n_alpha), range(n_alpha, n)):
        for side in (0, n):
            axes = [side + c for c in group]
            acc = np.zeros_like(t)
            for perm in itertools.permutations(range(len(axes))):
                order = list(range(2 * n))
                for c, p in zip(axes, perm):
                    order[c] = axes[p]
                acc += _sign(perm) * t.transpose(order)
            t = acc
    return t

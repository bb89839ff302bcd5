"""Does a chain of 4 mma.sync m16n8k32 (e4m3, fp32 accumulate) give bitwise the raw fp32 accumulator of 4
wgmma m64nNk32 issued back to back, over one 128-wide K block? (REPORT section 4 "D": could gemv keep raw
per-block accumulators that match the swap-AB kernel's bits.) Kernels: lab/mma_vs_wgmma.cu.

  python lab/mma_vs_wgmma.py [out.json] [--trials T] [--seed S]   # on an SM90 GPU, well under a minute
  python lab/mma_vs_wgmma.py --dry-run [out.json]                  # no GPU: layout checks, NVRTC compile,
                                                                   # the whole table with simulated engines

What runs: per case, T independent trials of A [64 x 128] and B [128 x 128] (E4M3 bytes; rows of A are the
MMA M side, "weights"; rows of B the N side, "tokens", as in gemv and swap-AB). Engines, all from fp32 +0:
  mma[ptx]   mma_chain<S>: S mma.sync over k32 steps 0..S-1, operands packed per the PTX ISA fragment
             tables (slot k of step s = byte 32s + k, the order wgmma reads).
  mma[gemv]  the same instruction chain with gemv's byte -> slot map (sm90_fp8_gemm_gemv.cu: a lane's 16-byte
             load of a 64-byte chunk; step s takes bytes {64(s/2) + 16t + 8(s%2) + 0..7}), so its k32 steps
             hold other k than wgmma's; compared only over the whole block (S = 4).
  wgmma[N]   wgmma_chain<N, S>: S wgmma m64nNk32 from 128B-swizzled shared tiles (the repo's descriptor,
             +32 B per step), scale-d 0 on the first, N in 8, 16, 64, 128.
Cases: random_bytes (every finite E4M3 byte, uniform: subnormals to 448), gaussian (per-row amax-scaled
normal values, like quantized data), cancel_within (8 pairs of big products per k32 step that cancel
exactly, the rest small), cancel_across (16 big products of steps 0-1 cancelled by steps 2-3: the chain's
fp32 accumulator holds a big value in between), dyadic (values 0, +-1/2, +-1, +-2: every partial sum exact,
a control that must match everywhere and equal the float64 sum).

Table columns: elements compared (fp32 outputs), bitwise mismatches (any bit differs), zero-sign (mismatches
that are only +0 vs -0), max ulp (distance in representable fp32 steps, +0 == -0). The reference table gives
each engine's max |x - ref| / sum_k |a_k b_k| against the float64 sum over the same k, and the fraction of
outputs equal to it exactly; a layout error shows as O(1) there. Exit status 0 whatever matches or not;
3 when a control fails (dyadic mismatch, a reference error over 2^-7): the measurement is then not valid.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SRC = HERE / "mma_vs_wgmma.cu"
sys.path.insert(0, str(HERE.parent))  # the checkout's fp8gemm (compiler options, header flattening)

M_ROWS, N_ROWS, KB = 64, 128, 128   # A rows (one wgmma M), B rows (the largest N), one K block
M_TILES, N_TILES, MAX_STEPS = 4, 16, 4
NS = (8, 16, 64, 128)
STEPS = (1, 4)
TILE_A, TILE_B = M_ROWS * KB, N_ROWS * KB
SMEM = TILE_A + TILE_B + 1024
REF_TOL = 2.0 ** -7   # max |x - ref| / sum|ab| a correct layout stays far below (fp8 MMA keeps >= ~13 bits)

# ---------------------------------------------------------------------------------------------- E4M3

def e4m3_table() -> np.ndarray:
    """float64 value of every byte as float8_e4m3fn (bias 7, no inf, NaN at 0x7F / 0xFF)."""
    v = np.empty(256)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 0xF, b & 7
        if e == 0xF and m == 7:
            v[b] = np.nan
        elif e == 0:
            v[b] = (m / 8.0) * 2.0 ** -6
        else:
            v[b] = (1.0 + m / 8.0) * 2.0 ** (e - 7)
        if s:
            v[b] = -v[b]
    return v


E4M3 = e4m3_table()
FINITE = np.array([b for b in range(256) if (b & 0x7F) != 0x7F], np.uint8)
_POS = np.arange(0x7F, dtype=np.uint8)               # 0x00..0x7E: the non-negative finite values, increasing


def encode_e4m3(x: np.ndarray) -> np.ndarray:
    """Nearest E4M3 byte (saturating at 448; ties to either: only data generation)."""
    mag = np.minimum(np.abs(x), 448.0)
    vals = E4M3[_POS]
    hi = np.clip(np.searchsorted(vals, mag), 1, len(vals) - 1)
    lo = hi - 1
    pick = np.where(mag - vals[lo] <= vals[hi] - mag, lo, hi).astype(np.uint8)
    return pick | np.where(x < 0, 0x80, 0).astype(np.uint8)

# ------------------------------------------------------------------------- layouts (PTX ISA, host side)
# mma.m16n8k32 .e4m3 (PTX ISA "Matrix Fragments for mma.m16n8k32"): groupID = lane >> 2,
# threadID_in_group = lane % 4. A (16 x 32, .row): 4 .b32 registers, a0..a15 low to high;
#   row = groupID for ai, 0 <= i < 4 || 8 <= i < 12, else groupID + 8
#   col = threadID_in_group * 4 + (i & 3), + 16 for i >= 8
# B (32 x 8, .col): 2 .b32 registers, b0..b7; row (k) = threadID_in_group * 4 + (i & 3), + 16 for i >= 4;
#   col (n) = groupID
# C / D (16 x 8 f32): c0..c3; row = groupID for i < 2, else groupID + 8; col = threadID_in_group * 2 + (i & 1)

def mma_a_rc(lane, i):
    g, t = lane >> 2, lane % 4
    row = np.where((i < 4) | ((i >= 8) & (i < 12)), g, g + 8)
    col = t * 4 + (i & 3) + np.where(i >= 8, 16, 0)
    return row, col


def mma_b_kn(lane, i):
    g, t = lane >> 2, lane % 4
    return t * 4 + (i & 3) + np.where(i >= 4, 16, 0), g + 0 * i


def mma_c_rc(lane, i):
    g, t = lane >> 2, lane % 4
    return np.where(i < 2, g, g + 8), t * 2 + (i & 1)


# wgmma m64nNk32 f32 accumulator (PTX ISA wgmma D fragment; the repo's ptx/wgmma_fp8.cuh header):
# thread tid of the warpgroup, d[i]: row 16 * (tid / 32) + (tid % 32) / 4 + 8 * ((i / 2) % 2),
# col 8 * (i / 4) + 2 * (tid % 4) + (i % 2).
def wgmma_d_rc(tid, i):
    lane = tid % 32
    return 16 * (tid // 32) + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + (i % 2)


def swizzle128(off):
    """TMA / wgmma 128B swizzle on offsets from a 1024-byte aligned base: the 16-byte chunk index
    (bits 4-6) XOR the row within the 8-row, 1024-byte atom (bits 7-9). An involution."""
    return off ^ (((off >> 7) & 7) << 4)


def gemv_kperm() -> np.ndarray:
    """perm[32 s + slot] = byte of the K block that gemv's lane quad feeds to k slot ``slot`` of MMA step s:
    lane t loads bytes [64 c + 16 t, +16) of chunk c; step s = 2 c + h takes bytes 8 h .. 8 h + 7 of those:
    the first four as slots 4t..4t+3 (register 0 / 1 of A, 0 of B), the next four as 16+4t..16+4t+3."""
    perm = np.empty(KB, np.int64)
    for s in range(MAX_STEPS):
        c, h = divmod(s, 2)
        for t in range(4):
            for j in range(2):
                for i in range(4):
                    perm[32 * s + 4 * t + 16 * j + i] = 64 * c + 16 * t + 8 * h + 4 * j + i
    return perm


KPERMS = {"ptx": np.arange(KB), "gemv": gemv_kperm()}


def pack_mma(A: np.ndarray, B: np.ndarray, perm: np.ndarray):
    """A [T,64,128], B [T,128,128] bytes -> afrag [T,4 mt,4 s,32,4] and bfrag [T,16 nt,4 s,32,2] uint32:
    step s's logical k slot kk holds byte perm[32 s + kk]. Element i of a fragment is byte i % 4 of
    register i // 4 (PTX: elements low to high; little-endian)."""
    Ap, Bp = A[:, :, perm], B[:, :, perm]
    lane = np.arange(32)[:, None]
    ar, ac = mma_a_rc(lane, np.arange(16)[None, :])                               # [32,16]
    rows = 16 * np.arange(M_TILES)[:, None, None, None] + ar[None, None]          # [4,1,32,16]
    cols = 32 * np.arange(MAX_STEPS)[None, :, None, None] + ac[None, None]        # [1,4,32,16]
    afrag = np.ascontiguousarray(Ap[:, rows, cols]).view("<u4")                   # [T,4,4,32,4]
    bk, bn = mma_b_kn(lane, np.arange(8)[None, :])                                # [32,8]
    brow = 8 * np.arange(N_TILES)[:, None, None, None] + bn[None, None]           # [16,1,32,8]
    bcol = 32 * np.arange(MAX_STEPS)[None, :, None, None] + bk[None, None]        # [1,4,32,8]
    bfrag = np.ascontiguousarray(Bp[:, brow, bcol]).view("<u4")                   # [T,16,4,32,2]
    return afrag, bfrag


def unpack_mma(raw: np.ndarray) -> np.ndarray:
    """raw [T,4 mt,16 nt,32,4] (the kernel's stores) -> C [T,64,128]."""
    lane = np.arange(32)[:, None]
    cr, cc = mma_c_rc(lane, np.arange(4)[None, :])
    rows = 16 * np.arange(M_TILES)[:, None, None, None] + cr[None, None]
    cols = 8 * np.arange(N_TILES)[None, :, None, None] + cc[None, None]
    C = np.zeros((raw.shape[0], M_ROWS, N_ROWS), raw.dtype)
    C[:, rows, cols] = raw
    return C


def smem_image(X: np.ndarray) -> np.ndarray:
    """X [T,R,128] bytes -> [T,R*128]: the tile as TMA's 128B swizzle lays it out from a 1024-aligned base."""
    T, R, _ = X.shape
    flat = X.reshape(T, R * KB)
    img = np.empty_like(flat)
    img[:, swizzle128(np.arange(R * KB))] = flat
    return img


def unpack_wgmma(raw: np.ndarray, n: int) -> np.ndarray:
    """raw [T,128,N/2] -> C [T,64,N]."""
    rows, cols = wgmma_d_rc(np.arange(128)[:, None], np.arange(n // 2)[None, :])
    C = np.zeros((raw.shape[0], M_ROWS, n), raw.dtype)
    C[:, rows, cols] = raw
    return C

# ---------------------------------------------------------------------------------------------- cases

def big_bytes(rng, shape):      # |v| in [32, 448] (exponent field 12..15), random sign
    return (rng.integers(0x60, 0x7F, shape) | (rng.integers(0, 2, shape) << 7)).astype(np.uint8)


def small_bytes(rng, shape):    # |v| <= 0.234 (exponent field 0..4, subnormals included), random sign
    return (rng.integers(0x00, 0x28, shape) | (rng.integers(0, 2, shape) << 7)).astype(np.uint8)


def any_bytes(rng, shape):
    return FINITE[rng.integers(0, len(FINITE), shape)]


def cancel_pairs(rng, A, B, t, k1, k2):
    """Products at k2 = -(products at k1) for every (row, col) of trial t: big A[:, k1], A[:, k2] = -A[:, k1],
    big B[:, k1], B[:, k2] = B[:, k1]."""
    A[t][:, k1] = big_bytes(rng, (M_ROWS, len(k1)))
    A[t][:, k2] = A[t][:, k1] ^ 0x80
    B[t][:, k1] = big_bytes(rng, (N_ROWS, len(k1)))
    B[t][:, k2] = B[t][:, k1]


def make_case(name: str, rng, T: int):
    shape_a, shape_b = (T, M_ROWS, KB), (T, N_ROWS, KB)
    if name == "random_bytes":
        return any_bytes(rng, shape_a), any_bytes(rng, shape_b)
    if name == "gaussian":
        xa, xb = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
        xa *= 448.0 / np.abs(xa).max(axis=2, keepdims=True)
        xb *= 448.0 / np.abs(xb).max(axis=2, keepdims=True)
        return encode_e4m3(xa), encode_e4m3(xb)
    if name == "dyadic":
        mags = np.array([0x00, 0x30, 0x38, 0x40], np.uint8)       # 0, 0.5, 1, 2
        sign = lambda s: (rng.integers(0, 2, s) << 7).astype(np.uint8)
        return mags[rng.integers(0, 4, shape_a)] | sign(shape_a), mags[rng.integers(0, 4, shape_b)] | sign(shape_b)
    if name in ("cancel_within", "cancel_across"):
        A, B = any_bytes(rng, shape_a), small_bytes(rng, shape_b)   # the rest: products up to ~100, most tiny
        for t in range(T):
            if name == "cancel_within":     # 8 random pairs inside each k32 step
                for s in range(MAX_STEPS):
                    p = 32 * s + rng.permutation(32)[:16]
                    cancel_pairs(rng, A, B, t, p[:8], p[8:])
            else:                           # 16 pairs from steps 0-1 to steps 2-3
                cancel_pairs(rng, A, B, t, rng.permutation(64)[:16], 64 + rng.permutation(64)[:16])
        return A, B
    raise ValueError(name)


CASES = ("random_bytes", "gaussian", "cancel_within", "cancel_across", "dyadic")


def reference(A, B, perm, steps):
    """float64 sum over the k the chain covers (exact: 8-bit x 8-bit products, <= 128 terms, 2^-18..2^18),
    and sum |a b|."""
    k = perm[: 32 * steps]
    a, b = E4M3[A[:, :, k]], E4M3[B[:, :, k]]
    return np.einsum("tmk,tnk->tmn", a, b), np.einsum("tmk,tnk->tmn", np.abs(a), np.abs(b))

# ------------------------------------------------------------------------------------------ compare

def ordered(bits: np.ndarray) -> np.ndarray:
    """fp32 bit patterns -> integers in value order, one per representable step; +0 and -0 -> 0."""
    i = bits.astype(np.int64)
    return np.where(i >= 2 ** 31, -(i - 2 ** 31), i)


def compare(x: np.ndarray, y: np.ndarray) -> dict:
    x, y = np.ascontiguousarray(x, np.float32), np.ascontiguousarray(y, np.float32)
    xb, yb = x.view(np.uint32), y.view(np.uint32)
    mism = xb != yb
    ulp = np.abs(ordered(xb) - ordered(yb))
    out = {"elements": int(x.size), "mismatches": int(mism.sum()), "zero_sign": int((mism & (ulp == 0)).sum()),
           "max_ulp": int(ulp.max()) if x.size else 0, "nonfinite": int((~np.isfinite(x)).sum() + (~np.isfinite(y)).sum())}
    idx = np.argwhere(mism)[:3]
    out["examples"] = [{"at": [int(v) for v in j], "a": float(x[tuple(j)]), "b": float(y[tuple(j)])} for j in idx]
    return out


def ref_check(x: np.ndarray, ref: np.ndarray, absref: np.ndarray) -> dict:
    err = np.abs(x.astype(np.float64) - ref) / np.maximum(absref, 2.0 ** -30)
    return {"max_rel_err": float(err.max()), "exact_frac": float((x.astype(np.float64) == ref).mean()),
            "rn_frac": float((x == ref.astype(np.float32)).mean())}

# ---------------------------------------------------------------------------------------------- engines

def kernel_names():
    return [f"mma_chain<{s}>" for s in STEPS] + [f"wgmma_chain<{n}, {s}>" for n in NS for s in STEPS]


def source() -> str:
    from fp8gemm.compiler import _flatten
    return _flatten(SRC, set())


class GpuEngines:
    def __init__(self):
        import cupy as cp
        from fp8gemm.compiler import NVRTC_OPTIONS

        self.cp = cp
        cc = cp.cuda.Device().compute_capability
        if cc != "90":
            raise SystemExit(f"needs an SM90 GPU (sm_90a), this device is sm_{cc}")
        t0 = time.time()
        self.mod = cp.RawModule(code=source(), options=NVRTC_OPTIONS, name_expressions=kernel_names())
        self.fn = {n: self.mod.get_function(n) for n in kernel_names()}
        for f in self.fn.values():
            f.compile()
        self.compile_s = time.time() - t0
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        self.device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])

    def mma(self, steps, afrag, bfrag):
        cp = self.cp
        T = afrag.shape[0]
        out = cp.empty((T, M_TILES, N_TILES, 32, 4), cp.float32)
        self.fn[f"mma_chain<{steps}>"]((T,), (128,), (cp.asarray(afrag), cp.asarray(bfrag), out))
        return cp.asnumpy(out)

    def wgmma(self, n, steps, img_a, img_b):
        cp = self.cp
        T = img_a.shape[0]
        out = cp.empty((T, 128, n // 2), cp.float32)
        self.fn[f"wgmma_chain<{n}, {steps}>"]((T,), (128,), (cp.asarray(img_a), cp.asarray(img_b), out), shared_mem=SMEM)
        return cp.asnumpy(out)


class SimEngines:
    """--dry-run stand-ins: execute each instruction by its PTX definition from the packed operands the kernels
    get (registers, swizzled images), written independently of the vectorized packers (per-lane loops, shifts,
    a model of the descriptor's address walk), summing exactly in float64 and rounding once to fp32. This checks
    the host's layout code end to end; it says nothing about the hardware's rounding."""
    device = "simulated (no GPU)"
    compile_s = 0.0

    def mma(self, steps, afrag, bfrag):
        T = afrag.shape[0]
        out = np.zeros((T, M_TILES, N_TILES, 32, 4))
        for mt in range(M_TILES):
            for nt in range(N_TILES):
                acc = np.zeros((T, 16, 8))
                for s in range(steps):
                    a = np.zeros((T, 16, 32))
                    b = np.zeros((T, 32, 8))
                    for lane in range(32):
                        g, t = lane >> 2, lane % 4
                        for i in range(16):
                            byte = (afrag[:, mt, s, lane, i // 4] >> (8 * (i % 4))) & 0xFF
                            row = g if (0 <= i < 4 or 8 <= i < 12) else g + 8
                            col = t * 4 + (i & 3) + (16 if i >= 8 else 0)
                            a[:, row, col] = E4M3[byte]
                        for i in range(8):
                            byte = (bfrag[:, nt, s, lane, i // 4] >> (8 * (i % 4))) & 0xFF
                            b[:, t * 4 + (i & 3) + (16 if i >= 4 else 0), g] = E4M3[byte]
                    acc = acc + a @ b
                for lane in range(32):
                    g, t = lane >> 2, lane % 4
                    for i in range(4):
                        out[:, mt, nt, lane, i] = acc[:, g if i < 2 else g + 8, t * 2 + (i & 1)]
        return out.astype(np.float32)

    @staticmethod
    def _read_desc(img, start, rows):
        """What a K-major 128B-swizzle descriptor (SBO 1024) starting ``start`` bytes past the 1024-aligned
        base reads for rows 0..rows-1, k 0..31: logical address start + (r / 8) * 1024 + (r % 8) * 128 + k,
        swizzled on its absolute bits."""
        r = np.arange(rows)[:, None]
        addr = start + (r // 8) * 1024 + (r % 8) * 128 + np.arange(32)[None, :]
        return img[:, swizzle128(addr)]

    def wgmma(self, n, steps, img_a, img_b):
        T = img_a.shape[0]
        acc = np.zeros((T, M_ROWS, n))
        for s in range(steps):
            a = E4M3[self._read_desc(img_a, 32 * s, M_ROWS)]
            b = E4M3[self._read_desc(img_b, 32 * s, n)]
            acc = acc + a @ b.transpose(0, 2, 1)
        out = np.zeros((T, 128, n // 2))
        for tid in range(128):
            w, lane = tid // 32, tid % 32
            for i in range(n // 2):
                out[:, tid, i] = acc[:, 16 * w + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2]
        return out.astype(np.float32)

# ------------------------------------------------------------------------------------------ experiment

def run(eng, trials: int, seed: int):
    rows, refs = [], []
    for ci, case in enumerate(CASES):
        rng = np.random.default_rng(seed + 1000 * ci)
        A, B = make_case(case, rng, trials)
        frags = {name: pack_mma(A, B, perm) for name, perm in KPERMS.items()}
        img_a, img_b = smem_image(A), smem_image(B)
        for steps in STEPS:
            ref, absref = reference(A, B, KPERMS["ptx"], steps)
            mma = unpack_mma(eng.mma(steps, *frags["ptx"]))
            wg = {n: unpack_wgmma(eng.wgmma(n, steps, img_a, img_b), n) for n in NS}
            refs.append({"case": case, "engine": "mma[ptx]", "steps": steps, **ref_check(mma, ref, absref)})
            for n in NS:
                refs.append({"case": case, "engine": f"wgmma[{n}]", "steps": steps,
                             **ref_check(wg[n], ref[:, :, :n], absref[:, :, :n])})
            for n in NS:
                rows.append({"case": case, "steps": steps, "compare": "mma[ptx] vs wgmma", "N": n,
                             **compare(mma[:, :, :n], wg[n])})
            for n in NS[:-1]:
                rows.append({"case": case, "steps": steps, "compare": "wgmma[N] vs wgmma[128]", "N": n,
                             **compare(wg[n], wg[128][:, :, :n])})
            # gemv's map: its k32 steps hold other k, so only the whole block (S = 4) compares with wgmma.
            gref, gabs = reference(A, B, KPERMS["gemv"], steps)
            mg = unpack_mma(eng.mma(steps, *frags["gemv"]))
            refs.append({"case": case, "engine": "mma[gemv]", "steps": steps, **ref_check(mg, gref, gabs)})
            if steps == MAX_STEPS:
                rows.append({"case": case, "steps": steps, "compare": "mma[gemv] vs wgmma", "N": 128, **compare(mg, wg[128])})
                rows.append({"case": case, "steps": steps, "compare": "mma[gemv] vs mma[ptx]", "N": 128, **compare(mg, mma)})
    return rows, refs


def controls(rows, refs):
    bad = [f"{r['case']} steps={r['steps']} {r['compare']} N={r['N']}: {r['mismatches']} mismatches"
           for r in rows if r["case"] == "dyadic" and r["mismatches"]]
    bad += [f"{r['case']} {r['engine']} steps={r['steps']}: max rel err {r['max_rel_err']:.3g}"
            for r in refs if r["max_rel_err"] > REF_TOL or (r["case"] == "dyadic" and r["exact_frac"] != 1.0)]
    bad += [f"{r['case']} {r['compare']} N={r['N']}: {r['nonfinite']} non-finite" for r in rows if r["nonfinite"]]
    return bad


def print_tables(rows, refs):
    print(f"{'case':<14} {'S':>1} {'compare':<24} {'N':>4} {'elements':>9} {'mismatch':>9} {'zero-sign':>9} {'max ulp':>8}")
    for r in rows:
        print(f"{r['case']:<14} {r['steps']:>1} {r['compare']:<24} {r['N']:>4} {r['elements']:>9} "
              f"{r['mismatches']:>9} {r['zero_sign']:>9} {r['max_ulp']:>8}")
    print("\nreference (float64 sum over the same k): max |x - ref| / sum|ab|; fraction equal to the exact sum;"
          " fraction equal to it rounded once to fp32 (RN)")
    print(f"{'case':<14} {'S':>1} {'engine':<11} {'max rel err':>12} {'exact':>7} {'RN':>7}")
    for r in refs:
        print(f"{r['case']:<14} {r['steps']:>1} {r['engine']:<11} {r['max_rel_err']:>12.3e} {r['exact_frac']:>7.4f} "
              f"{r['rn_frac']:>7.4f}")


def verdict(rows):
    out = {}
    for steps in STEPS:
        sel = [r for r in rows if r["steps"] == steps and r["compare"] == "mma[ptx] vs wgmma" and r["case"] != "dyadic"]
        out[f"mma_equals_wgmma_steps{steps}"] = all(r["mismatches"] == 0 for r in sel)
        sel = [r for r in rows if r["steps"] == steps and r["compare"] == "wgmma[N] vs wgmma[128]"]
        out[f"wgmma_independent_of_N_steps{steps}"] = all(r["mismatches"] == 0 for r in sel)
    sel = [r for r in rows if r["compare"] == "mma[gemv] vs wgmma" and r["case"] != "dyadic"]
    out["gemv_map_equals_wgmma"] = all(r["mismatches"] == 0 for r in sel)
    return out

# -------------------------------------------------------------------------------------- CPU-only checks

def nvrtc_compile(names):
    """The .cu through NVRTC with fp8gemm's options, no device needed: (cubin bytes, lowered names)."""
    from cupy.cuda import nvrtc
    from fp8gemm.compiler import NVRTC_OPTIONS

    prog = nvrtc.createProgram(source(), "mma_vs_wgmma.cu", [], [])
    try:
        for n in names:
            nvrtc.addNameExpression(prog, n)
        try:
            nvrtc.compileProgram(prog, list(NVRTC_OPTIONS))
        except nvrtc.NVRTCError as exc:
            raise RuntimeError(nvrtc.getProgramLog(prog)[-3000:]) from exc
        return _whole_elf(nvrtc.getCUBIN(prog)), {n: nvrtc.getLoweredName(prog, n) for n in names}
    finally:
        nvrtc.destroyProgram(prog)


def _whole_elf(cubin: bytes) -> bytes:
    """CuPy 14's nvrtc.getCUBIN returns the image less its last byte (seen here: the program header table
    then ends one byte past the data, and cuobjdump calls the file invalid); pad it back with zeros (the
    missing byte is the top byte of the last header's 64-bit p_align)."""
    import struct

    phoff, = struct.unpack_from("<Q", cubin, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", cubin, 0x36)
    return cubin + b"\0" * max(0, phoff + phentsize * phnum - len(cubin))


def sass_summary(cubin: bytes, lowered: dict) -> dict:
    """Per kernel, the count of each MMA-family SASS opcode (cuobjdump on PATH or CUDA's bin), else {}."""
    tool = shutil.which("cuobjdump") or next((p for p in ("/usr/local/cuda/bin/cuobjdump",) if os.path.exists(p)), None)
    if tool is None:
        return {}
    out = {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        for name, mangled in lowered.items():
            text = subprocess.run([tool, "-sass", "-fun", mangled, f.name], capture_output=True, text=True).stdout
            ops = {}
            for line in text.splitlines():
                parts = line.split("*/")
                if len(parts) < 2:
                    continue
                op = parts[1].strip().split(" ")[0].rstrip(";")
                if any(key in op for key in ("MMA", "GMMA", "F2FP")):
                    op = op.split(".")[0] + ("." + op.split(".")[1] if "." in op else "")
                    ops[op] = ops.get(op, 0) + 1
            out[name] = ops
    return out


def dry_checks() -> list[str]:
    """Layout invariants in numpy; returns failures."""
    fail = []
    def check(ok, what):
        if not ok:
            fail.append(what)
    try:
        import ml_dtypes
        ref = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        check(np.array_equal(ref, E4M3, equal_nan=True), "E4M3 table differs from ml_dtypes")
    except ImportError:
        pass
    check(np.nanmax(E4M3) == 448.0 and np.isnan(E4M3).sum() == 2 and len(FINITE) == 254, "E4M3 table")
    x = np.array([0.3, -447.0, 1e-4, -0.0, 1000.0, 0.0019])
    check(np.all(np.abs(E4M3[encode_e4m3(x)] - np.clip(x, -448, 448)) <= np.abs(x) * 2 ** -4 + 2 ** -10), "encode_e4m3")
    lane, i16, i8, i4 = np.arange(32)[:, None], np.arange(16)[None], np.arange(8)[None], np.arange(4)[None]
    r, c = mma_a_rc(lane, i16)
    check(len(set(zip(r.ravel(), c.ravel()))) == 512 and r.max() == 15 and c.max() == 31, "A fragment map not 16x32 1:1")
    k, n = mma_b_kn(lane, i8)
    check(len(set(zip(k.ravel(), n.ravel()))) == 256 and k.max() == 31 and n.max() == 7, "B fragment map not 32x8 1:1")
    r, c = mma_c_rc(lane, i4)
    check(len(set(zip(r.ravel(), c.ravel()))) == 128 and r.max() == 15 and c.max() == 7, "C fragment map not 16x8 1:1")
    for nn in NS:
        r, c = wgmma_d_rc(np.arange(128)[:, None], np.arange(nn // 2)[None])
        check(len(set(zip(r.ravel(), c.ravel()))) == 64 * nn and r.max() == 63 and c.max() == nn - 1, f"wgmma D map N={nn}")
    o = np.arange(TILE_B)
    check(np.array_equal(swizzle128(swizzle128(o)), o) and len(set(swizzle128(o))) == TILE_B, "swizzle not a bijection")
    for name, perm in KPERMS.items():
        check(sorted(perm) == list(range(KB)), f"{name} k map not a permutation")
    g = KPERMS["gemv"]
    check(sorted(g[:32]) == sorted([b + 16 * t for t in range(4) for b in range(8)]), "gemv step 0 != bytes 16t+0..7")
    check(not np.array_equal(np.sort(g[:32]), np.arange(32)), "gemv step 0 should differ from wgmma's k 0..31")
    return fail


def dry_run(json_path):
    fail = dry_checks()
    print("layout checks:", "ok" if not fail else "FAILED: " + "; ".join(fail))
    t0 = time.time()
    try:
        cubin, lowered = nvrtc_compile(kernel_names())
        print(f"NVRTC compile ({len(cubin)} B cubin, {time.time() - t0:.1f} s): ok; {', '.join(lowered.values())}")
        sass = sass_summary(cubin, lowered)
        for name, ops in sass.items():
            print(f"  SASS {name}: {ops}")
    except Exception as exc:  # noqa: BLE001 - report and go on with the host checks
        fail.append(f"NVRTC: {exc}")
        print("NVRTC compile FAILED:", exc)
        sass = {}
    rows, refs = run(SimEngines(), trials=2, seed=1)
    # The simulated engines round one exact sum: everything must match, every reference exactly.
    sim_bad = [r for r in rows if r["mismatches"] and r["compare"] != "mma[gemv] vs mma[ptx]"]
    sim_bad += [r for r in refs if r["rn_frac"] != 1.0]
    if sim_bad or controls(rows, refs):
        fail.append(f"simulated engines disagree with the float64 reference: {len(sim_bad)} rows")
    print_tables(rows[:8], refs[:6])
    print(f"... ({len(rows)} comparison rows, {len(refs)} reference rows over {len(CASES)} cases)")
    # compare() itself on planted differences
    x = np.array([1.0, -0.0, 3.0, -2.0], np.float32)
    y = np.array([1.0, 0.0, np.nextafter(np.float32(3.0), np.float32(4.0)), -2.0], np.float32)
    cmp = compare(x, y)
    if (cmp["mismatches"], cmp["zero_sign"], cmp["max_ulp"]) != (2, 1, 1):
        fail.append(f"compare() on planted differences: {cmp}")
    print("dry run:", "ok" if not fail else "FAILED")
    if json_path:
        Path(json_path).write_text(json.dumps({"dry_run": True, "failures": fail, "sass": sass}, indent=1))
    return 1 if fail else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="?", help="write the results here as JSON")
    ap.add_argument("--trials", type=int, default=64, help="independent 64x128x128 blocks per case (default 64)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="no GPU: layout checks, NVRTC compile, simulated engines")
    args = ap.parse_args()
    if args.dry_run:
        return dry_run(args.json)

    t0 = time.time()
    eng = GpuEngines()
    rows, refs = run(eng, args.trials, args.seed)
    print(f"device: {eng.device}; compile {eng.compile_s:.1f} s; {args.trials} trials per case; seed {args.seed}\n")
    print_tables(rows, refs)
    v = verdict(rows)
    bad = controls(rows, refs)
    print()
    for key, val in v.items():
        print(f"{key}: {val}")
    print("controls:", "ok" if not bad else "FAILED (measurement not valid): " + "; ".join(bad[:8]))
    try:
        cubin, lowered = nvrtc_compile(kernel_names())
        sass = sass_summary(cubin, lowered)
        for name, ops in sass.items():
            print(f"SASS {name}: {ops}")
    except Exception as exc:  # noqa: BLE001 - informational only
        sass = {"error": str(exc)}
    print(f"total {time.time() - t0:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": eng.device, "trials": args.trials, "seed": args.seed,
                                               "verdict": v, "controls_ok": not bad, "control_failures": bad,
                                               "rows": rows, "reference": refs, "sass": sass}, indent=1))
    return 3 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

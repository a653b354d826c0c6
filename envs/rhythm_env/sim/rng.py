"""Counter-based randomness: every random number is a pure function of (stream, seed, counter).

A counter-based generator (splitmix64 over a hashed key) lets the scalar env, the vectorized env,
agents and tests draw exactly the same numbers for the same (condition, seed) without carrying
generator state, and vectorizes over thousands of episodes in one numpy call.
"""

from __future__ import annotations

import zlib

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def stream_id(name: str) -> int:
    """A stable 32-bit id for a named random stream ("noise", "profile", "agent:random", ...)."""
    return zlib.crc32(name.encode())


def uniform(stream: int, seeds, counters) -> np.ndarray:
    """Uniform(0, 1) numbers for broadcast arrays of seeds and counters, in (0, 1) exclusive."""
    seeds = np.asarray(seeds, dtype=np.int64).astype(np.uint64)
    counters = np.asarray(counters, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        key = _mix(seeds * _GOLDEN + np.uint64(stream))
        bits = _mix(key ^ (counters * _GOLDEN + np.uint64(0x632BE59BD9B4E019)))
    # 53 random bits -> (0, 1); the half-ulp offset keeps log() finite in Box-Muller.
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def normal(stream: int, seeds, counters) -> np.ndarray:
    """Standard normal numbers (Box-Muller on two uniforms drawn from counters 2c and 2c+1)."""
    counters = np.asarray(counters, dtype=np.int64)
    u1 = uniform(stream, seeds, 2 * counters)
    u2 = uniform(stream, seeds, 2 * counters + 1)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def norm_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF without scipy (Abramowitz-Stegun 7.1.26 erf, |error| < 1.5e-7)."""
    z = np.asarray(z, dtype=np.float64)
    x = np.abs(z) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-x * x)
    return 0.5 * (1.0 + np.sign(z) * erf)

#!/usr/bin/python3
"""NF4 with double quantization, written from the QLoRA paper's definition (Dettmers et
al. 2023, section 3 and appendix E) and bitsandbytes' storage layout, in numpy: the
independent reference nf4_test checks worker/trainer/nf4.cc against, bit for bit.

  nf4_reference.py IN.f32 OUT_PREFIX

reads float32 little-endian values and writes OUT_PREFIX.codes (two 4-bit codes per byte,
element 2i in the high nibble), .absmax_codes (uint8 per block of 64), .scales (float32 per
256 blocks), .offset (one float32) and .dequant (float32 per value).

Definitions (the contract nf4.h states):
  block absmax m = max |x| over 64 values; y = x * float32(1 / m); the code is the nearest
  NF4 level, a value exactly halfway taking the lower one (halfway points are the levels'
  midpoints rounded to float32); a block of zeros codes as the level 0.0.
  offset = float32(sum of the absmaxes in double, in order / blocks); centred = m - offset;
  per group of 256 blocks, s = max |centred|, code = nearest value of the signed dynamic
  8-bit map to centred * float32(1 / s) (ties: the lower one).
  dequantized = level * (map[code] * s + offset), every product and sum in float32.
"""
import sys

import numpy as np

BLOCK = 64
GROUP = 256

# The NormalFloat levels as published.
LEVELS = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=np.float64)


def dynamic_map():
    """bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8),
    computed in float64 (linspace written out as start + k * step) and rounded to float32."""
    data = []
    for i in range(7):
        points = 2 ** i + 1
        step = 0.9 / (points - 1)
        scale = 10.0 ** (i - 6)
        for k in range(points - 1):
            lo = 0.1 + k * step
            hi = 0.1 + (k + 1) * step
            mean = (lo + hi) / 2.0
            data.append(scale * mean)
            data.append(-(scale * mean))
    data += [0.0, 1.0]
    assert len(data) == 256
    return np.sort(np.array(data, dtype=np.float64).astype(np.float32))


def nearest(table, y):
    """Index of the nearest table value to each y (float32 distances); ties: the lower."""
    dist = np.abs(table[None, :] - y[:, None])
    return np.argmin(dist, axis=1)  # the first of equal minima: the lower value


def quantize(x):
    n = x.size
    blocks = (n + BLOCK - 1) // BLOCK
    padded = np.zeros(blocks * BLOCK, dtype=np.float32)
    padded[:n] = x
    tiles = padded.reshape(blocks, BLOCK)
    absmax = np.abs(tiles).max(axis=1).astype(np.float32)
    mids = ((LEVELS[:-1] + LEVELS[1:]) / 2).astype(np.float32)
    inv = np.zeros(blocks, dtype=np.float32)
    np.divide(np.float32(1.0), absmax, out=inv, where=absmax > 0)
    y = (tiles * inv[:, None]).astype(np.float32)
    codes = (y[:, :, None] > mids[None, None, :]).sum(axis=2).astype(np.uint8)  # levels below y
    codes[absmax == 0, :] = 7
    codes = codes.reshape(-1)[:n]
    if n % 2:
        codes = np.append(codes, np.uint8(0))
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8)

    total = 0.0
    for a in absmax:  # in order, in double
        total += float(a)
    offset = np.float32(total / blocks) if blocks else np.float32(0)
    centred = (absmax - offset).astype(np.float32)
    table = dynamic_map()
    groups = (blocks + GROUP - 1) // GROUP
    scales = np.zeros(groups, dtype=np.float32)
    absmax_codes = np.zeros(blocks, dtype=np.uint8)
    for g in range(groups):
        part = centred[g * GROUP:(g + 1) * GROUP]
        s = np.abs(part).max().astype(np.float32)
        scales[g] = s
        y = (part * (np.float32(1.0) / s)).astype(np.float32) if s > 0 else np.zeros_like(part)
        absmax_codes[g * GROUP:(g + 1) * GROUP] = nearest(table, y)
    return packed, absmax_codes, scales, offset


def dequantize(packed, absmax_codes, scales, offset, n):
    table = dynamic_map()
    levels = LEVELS.astype(np.float32)
    codes = np.empty(packed.size * 2, dtype=np.uint8)
    codes[0::2] = packed >> 4
    codes[1::2] = packed & 0x0F
    codes = codes[:n]
    block = np.arange(n) // BLOCK
    scaled = (table[absmax_codes] * scales[np.arange(absmax_codes.size) // GROUP]).astype(np.float32)
    absmax = (scaled + offset).astype(np.float32)
    return (levels[codes] * absmax[block]).astype(np.float32)


def main():
    x = np.fromfile(sys.argv[1], dtype='<f4')
    prefix = sys.argv[2]
    if not np.all(np.isfinite(x)):
        sys.exit("not finite")
    packed, absmax_codes, scales, offset = quantize(x)
    packed.tofile(prefix + '.codes')
    absmax_codes.tofile(prefix + '.absmax_codes')
    scales.astype('<f4').tofile(prefix + '.scales')
    np.array([offset], dtype='<f4').tofile(prefix + '.offset')
    dequantize(packed, absmax_codes, scales, offset, x.size).astype('<f4').tofile(prefix + '.dequant')


if __name__ == '__main__':
    main()

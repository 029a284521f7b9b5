#!/usr/bin/env python3
"""Which repair structure gives coded datagrams the lowest p99 at a given repair rate?

A scratch model for docs/experiments/udp-p99.md (issue 27), not the implementation:
datagrams one per slot (4.8 ms), `r` repairs per datagram right behind them (credit, as
the session sends them), every packet lost with probability 0.1, and a receiver that
decodes by Gaussian elimination over the missing datagrams (random coefficients modulo a
large prime, so ranks are generic: what GF(256) gives with probability ~0.996). A scheme
chooses which held datagrams each repair combines: `span` (the newest `W` datagrams),
`lag` (leaving out the newest `L`) and `density` (each datagram in the span included with
some probability). Prints the p99 delay in slots over 12 runs of 6,250 datagrams and the
residual loss.

    python3 docs/experiments/udp-p99-structures.py [RATE]
"""
import random
import sys

P = 2**31 - 1
HOLD = 31  # slots a datagram stays in the sender's window (two 75 ms deadlines)


class Decoder:
    """Reduced row-echelon rows keyed by pivot, over the unknown datagrams only."""

    def __init__(self):
        self.rows = {}

    def insert(self, row, known):
        row = {k: v for k, v in row.items() if k not in known and v}
        for pv in sorted(row):
            if pv in row and pv in self.rows:
                c = row[pv]
                for k, v in self.rows[pv].items():
                    row[k] = (row.get(k, 0) - c * v) % P
                row = {k: v for k, v in row.items() if v}
        if not row:
            return []
        pv = min(row)
        inv = pow(row[pv], P - 2, P)
        row = {k: v * inv % P for k, v in row.items()}
        for r in self.rows.values():
            if pv in r:
                c = r[pv]
                for k, v in row.items():
                    r[k] = (r.get(k, 0) - c * v) % P
                for k in [k for k, v in r.items() if v == 0]:
                    del r[k]
        self.rows[pv] = row
        out = []
        while True:
            solved = [p for p, r in self.rows.items() if len(r) == 1]
            if not solved:
                return out
            for p in solved:
                if p in self.rows:
                    del self.rows[p]
                    known.add(p)
                    out.append(p)
                    for r in self.rows.values():
                        r.pop(p, None)


def run(rate, loss, count, seed, scheme):
    rnd = random.Random(seed)
    credit, known, delay, dec, j = 0.0, set(), {}, Decoder(), 0
    for i in range(count):
        if rnd.random() >= loss:
            known.add(i)
            delay[i] = 0
        credit += rate
        while credit >= 1.0:
            credit -= 1.0
            span, lag, density = scheme(j)
            j += 1
            if rnd.random() < loss:
                continue
            first = max(0, i - min(span, HOLD) + 1)
            row = {
                k: rnd.randrange(1, P)
                for k in range(first, i + 1 - lag)
                if k not in known and rnd.random() < density(i - k)
            }
            for x in dec.insert(row, known):
                delay[x] = i - x
    d = sorted(delay.get(i, 10**9) for i in range(count))
    return d[int(0.99 * (count - 1))], sum(1 for v in d if v >= 10**9) / count


ALL = lambda age: 1.0
SCHEMES = {
    "dense, whole window (the session's code)": lambda j: (HOLD, 0, ALL),
    "newest 16": lambda j: (16, 0, ALL),
    "newest 12": lambda j: (12, 0, ALL),
    "alternate whole / newest 12": lambda j: ([HOLD, 12][j % 2], 0, ALL),
    "alternate whole / newest 8": lambda j: ([HOLD, 8][j % 2], 0, ALL),
    "tree: newest 8, 16, 8, 31, ...": lambda j: (min(HOLD, 8 << ((j + 1) & -(j + 1)).bit_length() - 1), 0, ALL),
    "every other repair leaves out the newest 4": lambda j: (HOLD, [0, 4][j % 2], ALL),
    "every third repair leaves out the newest 4": lambda j: (HOLD, [0, 0, 4][j % 3], ALL),
    "each datagram with probability 0.7": lambda j: (HOLD, 0, lambda age: 0.7),
    "density falling with age (1 → 0.3)": lambda j: (HOLD, 0, lambda age: max(0.3, 1 - age / 20)),
}

if __name__ == "__main__":
    rate = float(sys.argv[1]) if len(sys.argv) > 1 else 0.30
    print(f"r = {rate} repairs per datagram, 10 % loss, 12 runs of 6,250 datagrams")
    for name, scheme in SCHEMES.items():
        res = [run(rate, 0.10, 6250, 100 + s, scheme) for s in range(12)]
        p99 = sorted(x[0] for x in res)
        resid = sorted(x[1] for x in res)
        print(
            f"{name:45s} p99 slots min/median/max {p99[0]}/{p99[6]}/{p99[-1]}"
            f"  residual max {100 * resid[-1]:.3f} %",
            flush=True,
        )

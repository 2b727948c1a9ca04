"""Make the demo's data set: three classes of points in four features, a fixed seed.

Features 0 and 1 carry the classes on a small scale; feature 2 is pure noise on a large scale
(so scaling the features matters); feature 3 is informative but noisy. Labels are flipped for 8%
of the points (so k=1 overfits). Run ``python data/make_data.py`` to write train.csv, dev.csv
and holdout.csv again; the files shipped are exactly its output (seed 20).
"""

import os
import random

SEED = 20
CENTERS = {0: (0.0, 0.0, 2.0), 1: (1.2, 0.4, -1.0), 2: (0.3, 1.3, 0.5)}


def rows(rng, n):
    out = []
    for _ in range(n):
        c = rng.randrange(3)
        a, b, d = CENTERS[c]
        x = [a + rng.gauss(0, 0.45), b + rng.gauss(0, 0.45), rng.gauss(0, 40.0), d + rng.gauss(0, 2.5)]
        label = c if rng.random() > 0.08 else rng.randrange(3)
        out.append(x + [label])
    return out


def write(path, data):
    with open(path, "w") as fh:
        fh.write("f0,f1,f2,f3,label\n")
        for r in data:
            fh.write(",".join(f"{v:.4f}" for v in r[:4]) + f",{r[4]}\n")


if __name__ == "__main__":
    rng = random.Random(SEED)
    here = os.path.dirname(os.path.abspath(__file__))
    for name, n in (("train", 240), ("dev", 120), ("holdout", 120)):
        write(os.path.join(here, f"{name}.csv"), rows(rng, n))

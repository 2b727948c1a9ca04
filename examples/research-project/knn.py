"""A k-nearest-neighbours classifier in plain Python, configured by config.json."""

import json
import math


def load(path):
    with open(path) as fh:
        next(fh)
        return [([float(v) for v in line.split(",")[:4]], int(line.split(",")[4])) for line in fh if line.strip()]


def scaler(train, how):
    if how == "none":
        return lambda x: x
    cols = list(zip(*[x for x, _ in train]))
    if how == "standard":
        mean = [sum(c) / len(c) for c in cols]
        sd = [math.sqrt(sum((v - m) ** 2 for v in c) / len(c)) or 1.0 for c, m in zip(cols, mean)]
        return lambda x: [(v - m) / s for v, m, s in zip(x, mean, sd)]
    if how == "minmax":
        lo, hi = [min(c) for c in cols], [max(c) for c in cols]
        return lambda x: [(v - a) / ((b - a) or 1.0) for v, a, b in zip(x, lo, hi)]
    raise ValueError(f"unknown scaling {how!r}")


DISTANCES = {
    "euclidean": lambda a, b: math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b))),
    "manhattan": lambda a, b: sum(abs(x - y) for x, y in zip(a, b)),
}


def classify(train, x, k, dist, weighting):
    near = sorted((dist(x, tx), label) for tx, label in train)[:k]
    votes = {}
    for d, label in near:
        votes[label] = votes.get(label, 0.0) + (1.0 / (d + 1e-9) if weighting == "distance" else 1.0)
    return max(sorted(votes), key=lambda c: votes[c])


def accuracy(config_path, train_path, test_path):
    cfg = json.load(open(config_path))
    train, test = load(train_path), load(test_path)
    scale = scaler(train, cfg.get("scaling", "none"))
    train = [(scale(x), y) for x, y in train]
    dist = DISTANCES[cfg.get("distance", "euclidean")]
    hits = sum(classify(train, scale(x), int(cfg["k"]), dist, cfg.get("weighting", "uniform")) == y for x, y in test)
    return hits / len(test)

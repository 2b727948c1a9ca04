#!/usr/bin/env python3
"""A deterministic example research agent for `loopx demo --research` (and a template for your own).

`loopx run --agent-cmd "python researcher.py"` starts it once per turn, in the experiment's
worktree (the frontier checked out), with the turn packet in $LOOPX_PACKET_JSON. Without a model
it does what a research agent would: it states a hypothesis (`loopx trial hypothesis`), changes
the KNN classifier's config.json, and exits. It does not commit, measure or decide: loopx commits
the change, runs the fixed dev evaluation, and keeps or discards it. Its notebook below holds
ideas that help, ideas that do not, and one that crashes (a distance the classifier lacks).
It even claims a number it did not measure, to show that such a claim decides nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

NOTEBOOK = [
    ("k", 5, "k=1 memorises the 8% label noise: a vote among 5 neighbours should smooth it"),
    ("scaling", "standard", "feature f2 spans +-100 while f0 and f1 span +-2: scaling to unit variance "
                            "lets the informative features count"),
    ("distance", "manhattan", "manhattan distance is less swayed by one noisy feature"),
    ("distance", "cosine", "cosine similarity ignores the magnitude of the points"),
    ("k", 9, "with scaled features a wider vote (k=9) should still help against the noise"),
    ("weighting", "distance", "weighting the votes by 1/distance trusts the nearest points more"),
    ("scaling", "minmax", "min-max scaling instead of unit variance"),
    ("k", 15, "an even wider vote, k=15"),
]


def main() -> int:
    packet = json.load(open(os.environ["LOOPX_PACKET_JSON"], encoding="utf-8"))
    trial = packet["experiment"]["trials"]  # trials recorded so far, the baseline included
    key, value, why = NOTEBOOK[(trial - 1) % len(NOTEBOOK)]
    subprocess.run([sys.executable, "-m", "loopx", "trial", "hypothesis", f"{key}={value}: {why}",
                    "--claim", "val_acc=0.99"], check=True, stdout=subprocess.DEVNULL)
    with open("config.json", encoding="utf-8") as fh:
        config = json.load(fh)
    config[key] = value
    with open("config.json", "w", encoding="utf-8") as fh:
        json.dump(config, fh)
        fh.write("\n")
    print(f"researcher: trying {key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

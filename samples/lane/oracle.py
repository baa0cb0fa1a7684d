"""The independent oracle: the lanes' expected trajectories, computed plainly.

It shares no code with ``lanekit`` (only the published constants and the data
formula are repeated here, on purpose, so that a change to the learner's data,
split or rates shows up as a mismatch). One process, plain binary64 floats, the
declared operation order, for N >= 2 owners (N coordinates, owner j holding the
j+1 samples after owner j-1's):

  owner gradient   r = (((w0*x0 + w1*x1) + w2*x2) + ...) - y; g_k = g_k + r*x_k   (from 0.0, sample order)
  combine          G_k = G_k + g_k over owner-0, owner-1, ... owner-{N-1} (from 0.0); mean_k = G_k / N_samples
  momentum         m = beta*m + mean; w = w - rate*m
  independent      target = (0.0 + y...) / n; u = beta*u + rate*(target - v); v = v + u

Usage: ``python3 samples/lane/oracle.py LANE [UPDATES [OWNERS]]`` prints the
expected checkpoint state after each update as hex floats.
"""

from __future__ import annotations

import json
import sys

# The two-GPU data: three samples of two features.
X2 = [(1.0, 2.0), (0.5, -1.5), (-2.0, 0.25)]
Y2 = [3.0, -1.0, 0.5]
RATES = {"partitioned": (0.05, 0.9), "coordinates": (0.05, 0.9), "independent": (0.3, 0.7)}


def data(owners: int) -> tuple[list[list[float]], list[float], list[list[int]]]:
    """The samples and each owner's sample indices for ``owners`` owners."""
    if owners < 2:
        raise ValueError("the oracle needs at least 2 owners")
    groups = []
    start = 0
    for j in range(owners):
        groups.append(list(range(start, start + j + 1)))
        start += j + 1
    if owners == 2:
        return [list(row) for row in X2], list(Y2), groups
    x = [[((5 * i + 3 * k + 1) % 9 - 4) / 4.0 for k in range(owners)] for i in range(start)]
    y = [((7 * i + 2) % 11 - 5) / 4.0 for i in range(start)]
    return x, y, groups


def trajectory(lane: str, updates: int = 5, owners: int = 2) -> list[dict[str, list[float]]]:
    """The logical state after each of ``updates`` updates from the initial state."""
    rate, beta = RATES[lane]
    x, y, groups = data(owners)
    rows: list[dict[str, list[float]]] = []
    if lane == "independent":
        v = [0.0] * owners
        u = [0.0] * owners
        targets = []
        for samples in groups:
            total = 0.0
            for i in samples:
                total = total + y[i]
            targets.append(total / float(len(samples)))
        for _ in range(updates):
            for k in range(owners):
                u[k] = beta * u[k] + rate * (targets[k] - v[k])
                v[k] = v[k] + u[k]
            rows.append({"state": list(v), "velocity": list(u)})
        return rows
    w = [0.0] * owners
    m = [0.0] * owners
    for _ in range(updates):
        big_g = [0.0] * owners
        big_n = 0
        for samples in groups:  # declared combine order: owner-0, owner-1, ...
            g = [0.0] * owners
            for i in samples:
                acc = w[0] * x[i][0]
                for k in range(1, owners):
                    acc = acc + w[k] * x[i][k]
                r = acc - y[i]
                for k in range(owners):
                    g[k] = g[k] + r * x[i][k]
            for k in range(owners):
                big_g[k] = big_g[k] + g[k]
            big_n = big_n + len(samples)
        for k in range(owners):
            mean = big_g[k] / float(big_n)
            m[k] = beta * m[k] + mean
            w[k] = w[k] - rate * m[k]
        rows.append({"param": list(w), "momentum": list(m)})
    return rows


def evaluation(lane: str, state: dict[str, list[float]], owners: int = 2) -> dict[str, object]:
    """The expected evaluation result of a checkpoint's state."""
    x, y, groups = data(owners)
    if lane == "independent":
        pooled = 0.0
        total = 0
        for k, samples in enumerate(groups):
            pooled = pooled + float(len(samples)) * state["state"][k]
            total = total + len(samples)
        return {"pooled": (pooled / float(total)).hex()}
    w = state["param"]
    loss = 0.0
    predictions = []
    for i in range(len(y)):
        pred = w[0] * x[i][0]
        for k in range(1, owners):
            pred = pred + w[k] * x[i][k]
        r = pred - y[i]
        loss = loss + r * r
        predictions.append(pred.hex())
    return {"predictions": predictions, "loss": (loss / float(len(y))).hex()}


def hex_rows(lane: str, updates: int = 5, owners: int = 2) -> list[dict[str, object]]:
    """The trajectory in the learner's row form: ``{"step": t, "chunks": {name: [hex]}}``."""
    return [
        {"step": t + 1, "chunks": {k: [v.hex() for v in vals] for k, vals in sorted(row.items())}}
        for t, row in enumerate(trajectory(lane, updates, owners))
    ]


if __name__ == "__main__":
    lane_name = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    owner_count = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    print(json.dumps(hex_rows(lane_name, count, owner_count), indent=1))

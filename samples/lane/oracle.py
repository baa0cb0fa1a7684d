"""The independent oracle: the lanes' expected trajectories, computed plainly.

It shares no code with ``lanekit`` (only the published constants are repeated
here, on purpose, so that a change to the learner's data or rates shows up as
a mismatch). One process, plain binary64 floats, the declared operation order:

  owner gradient   r = (w0*x0 + w1*x1) - y; g0 = g0 + r*x0; g1 = g1 + r*x1   (from 0.0, sample order)
  combine          G_j = G_j + g_j over owner-0 then owner-1 (from 0.0); mean_j = G_j / N
  momentum         m = beta*m + mean; w = w - rate*m
  independent      target = (0.0 + y...) / n; u = beta*u + rate*(target - v); v = v + u

Usage: ``python3 samples/lane/oracle.py LANE [UPDATES]`` prints the expected
checkpoint state after each update as hex floats.
"""

from __future__ import annotations

import json
import sys

X = [(1.0, 2.0), (0.5, -1.5), (-2.0, 0.25)]
Y = [3.0, -1.0, 0.5]
OWNER_SAMPLES = [[0], [1, 2]]
RATES = {"partitioned": (0.05, 0.9), "coordinates": (0.05, 0.9), "independent": (0.3, 0.7)}


def trajectory(lane: str, updates: int = 5) -> list[dict[str, list[float]]]:
    """The logical state after each of ``updates`` updates from the initial state."""
    rate, beta = RATES[lane]
    rows: list[dict[str, list[float]]] = []
    if lane == "independent":
        v = [0.0, 0.0]
        u = [0.0, 0.0]
        targets = []
        for samples in OWNER_SAMPLES:
            total = 0.0
            for i in samples:
                total = total + Y[i]
            targets.append(total / float(len(samples)))
        for _ in range(updates):
            for k in range(2):
                u[k] = beta * u[k] + rate * (targets[k] - v[k])
                v[k] = v[k] + u[k]
            rows.append({"state": list(v), "velocity": list(u)})
        return rows
    w = [0.0, 0.0]
    m = [0.0, 0.0]
    for _ in range(updates):
        big_g = [0.0, 0.0]
        big_n = 0
        for samples in OWNER_SAMPLES:  # declared combine order: owner-0, owner-1
            g0 = 0.0
            g1 = 0.0
            for i in samples:
                r = (w[0] * X[i][0] + w[1] * X[i][1]) - Y[i]
                g0 = g0 + r * X[i][0]
                g1 = g1 + r * X[i][1]
            big_g[0] = big_g[0] + g0
            big_g[1] = big_g[1] + g1
            big_n = big_n + len(samples)
        for j in range(2):
            mean = big_g[j] / float(big_n)
            m[j] = beta * m[j] + mean
            w[j] = w[j] - rate * m[j]
        rows.append({"param": list(w), "momentum": list(m)})
    return rows


def evaluation(lane: str, state: dict[str, list[float]]) -> dict[str, object]:
    """The expected evaluation result of a checkpoint's state."""
    if lane == "independent":
        pooled = 0.0
        total = 0
        for k, samples in enumerate(OWNER_SAMPLES):
            pooled = pooled + float(len(samples)) * state["state"][k]
            total = total + len(samples)
        return {"pooled": (pooled / float(total)).hex()}
    w = state["param"]
    loss = 0.0
    predictions = []
    for i in range(3):
        pred = w[0] * X[i][0] + w[1] * X[i][1]
        r = pred - Y[i]
        loss = loss + r * r
        predictions.append(pred.hex())
    return {"predictions": predictions, "loss": (loss / 3.0).hex()}


def hex_rows(lane: str, updates: int = 5) -> list[dict[str, object]]:
    """The trajectory in the learner's row form: ``{"step": t, "chunks": {name: [hex]}}``."""
    return [
        {"step": t + 1, "chunks": {k: [v.hex() for v in vals] for k, vals in sorted(row.items())}}
        for t, row in enumerate(trajectory(lane, updates))
    ]


if __name__ == "__main__":
    lane_name = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    print(json.dumps(hex_rows(lane_name, count), indent=1))

"""The three lanes' update rules, split into coordinator and owner halves.

Arithmetic, in the one declared order (the oracle repeats it independently):

* gradient of an owner, over its samples in index order, from ``g = 0``:
  ``r = (((w0*x0 + w1*x1) + w2*x2) + ...) - y; g_k = g_k + r*x_k`` for each
  coordinate k in order; ``n`` = sample count (N owners: N coordinates);
* combine, at the coordinator, in the spec's declared ``combine_order`` from ``G = 0``:
  ``G_j = G_j + g_j``, ``N = N + n``; then ``mean_j = G_j / N``;
* momentum: ``m = beta*m + mean; w = w - rate*m``;
* independent rule (no gradient): ``target = (0 + y_a + ...) / n`` once, then
  ``u = beta*u + rate*(target - v); v = v + u``.

Owners keep their state in their backend (GPU memory on the physical path)
and a host shadow copy; the host-shadow control overwrites the shadow before
every forward pass, which must change nothing because only the backend state
is ever read.
"""

from __future__ import annotations

from typing import Any

from .numeric import Backend
from .spec import LearnerSpec, hexf, unhexf
from .wire import Channel, WireError

__all__ = ["Coordinator", "Owner", "evaluate", "initial_chunks", "owner_shard"]

Chunks = dict[str, list[float]]


def initial_chunks(lane: str, owners: int = 2) -> Chunks:
    """The state before the first update: one value per owner (independent) or per coordinate (N of them)."""
    if lane == "independent":
        return {"state": [0.0] * owners, "velocity": [0.0] * owners}
    return {"param": [0.0] * owners, "momentum": [0.0] * owners}


def owner_shard(lane: str, chunks: Chunks, index: int) -> Chunks:
    """What owner ``index`` holds of the logical state."""
    if lane == "coordinates":
        return {name: list(values) for name, values in chunks.items()}
    return {name: [values[index]] for name, values in chunks.items()}


def _hex(values: list[float]) -> list[str]:
    return [hexf(v) for v in values]


def _unhex(values: list[str]) -> list[float]:
    return [unhexf(v) for v in values]


class Owner:
    """One owner process's half of the learner."""

    def __init__(self, spec: LearnerSpec, role: str, backend: Backend, *, shadow: bool = False) -> None:
        self.spec = spec
        self.role = role
        self.index = list(spec.owners).index(role)
        self.be = backend
        samples = spec.owner_samples(role)
        self.n = len(samples)
        c = backend.const
        data_x, data_y = spec.data
        self.xs = [[c(a) for a in data_x[i]] for i in samples]
        self.ys = [c(data_y[i]) for i in samples]
        self.zero = c(0.0)
        self.rate = c(spec.rate)
        self.beta = c(spec.momentum)
        self.state: dict[str, list[Any]] = {}
        self.shadow: Chunks = {}
        self.shadow_mode = shadow
        self.overwrites = 0
        self.target: Any = None
        if spec.lane == "independent":
            total = self.zero
            for y in self.ys:
                total = total + y
            self.target = total / c(float(self.n))

    # -- state ----------------------------------------------------------------
    def load(self, chunks: Chunks) -> None:
        """Put a shard into backend memory and refresh the host shadow."""
        self.state = {name: [self.be.const(v) for v in values] for name, values in chunks.items()}
        self._refresh_shadow()

    def _refresh_shadow(self) -> None:
        self.shadow = {name: [self.be.read(v) for v in values] for name, values in self.state.items()}

    def _overwrite_shadow(self, step: int) -> None:
        # Distinct finite values, different at every step: the control's whole point.
        for k, name in enumerate(sorted(self.shadow)):
            self.shadow[name] = [
                1.0e6 + 1000.0 * step + 100.0 * self.index + 10.0 * k + j + 0.5 for j in range(len(self.shadow[name]))
            ]
        self.overwrites += 1

    def published(self) -> dict[str, list[str]]:
        """The shard as read back from backend memory (never from the shadow)."""
        return {name: _hex([self.be.read(v) for v in values]) for name, values in self.state.items()}

    def resident(self) -> bool:
        """Every state value lives in backend memory."""
        return all(self.be.resident(v) for values in self.state.values() for v in values)

    # -- rules ------------------------------------------------------------------
    def gradient(self, w: list[Any]) -> tuple[list[float], int]:
        """Sum of gradients over this owner's samples, and their count."""
        g = [self.zero for _ in w]
        for x, y in zip(self.xs, self.ys, strict=True):
            acc = w[0] * x[0]
            for k in range(1, len(w)):
                acc = acc + w[k] * x[k]
            r = acc - y
            for k in range(len(w)):
                g[k] = g[k] + r * x[k]
        return [self.be.read(v) for v in g], self.n

    def apply_momentum(self, means: list[float]) -> None:
        """``m = beta*m + mean; w = w - rate*m`` for every coordinate held."""
        w = self.state["param"]
        m = self.state["momentum"]
        for j, mean in enumerate(means):
            m[j] = self.beta * m[j] + self.be.const(mean)
            w[j] = w[j] - self.rate * m[j]

    def advance_local(self) -> None:
        """The independent lane's local rule (no gradient)."""
        v = self.state["state"]
        u = self.state["velocity"]
        u[0] = self.beta * u[0] + self.rate * (self.target - v[0])
        v[0] = v[0] + u[0]

    # -- protocol ---------------------------------------------------------------
    def serve(self, chan: Channel) -> dict[str, Any]:
        """Answer the coordinator until it says finish; return the closing report."""
        while True:
            msg = chan.recv()
            kind = msg["type"]
            if kind == "init":
                self.load({name: _unhex(values) for name, values in msg["state"].items()})
            elif kind == "forward":
                step = int(msg["step"])
                if self.shadow_mode:
                    self._overwrite_shadow(step)
                if self.spec.lane == "partitioned":
                    w = [self.be.const(v) for v in _unhex(msg["param"])]
                else:
                    w = list(self.state["param"])
                g, n = self.gradient(w)
                chan.send({"type": "contribution", "step": step, "g": _hex(g), "n": n})
            elif kind == "apply":
                self.apply_momentum(_unhex(msg["mean"]))
                self._refresh_shadow()
                chan.send({"type": "owned", "step": msg["step"], "state": self.published()})
            elif kind == "advance":
                step = int(msg["step"])
                if self.shadow_mode:
                    self._overwrite_shadow(step)
                self.advance_local()
                self._refresh_shadow()
                chan.send({"type": "owned", "step": step, "state": self.published()})
            elif kind == "finish":
                report = {
                    "type": "bye",
                    "role": self.role,
                    "backend": self.be.describe(),
                    "resident": self.resident(),
                    "shadow_overwrites": self.overwrites,
                }
                chan.send(report)
                return report
            else:
                raise WireError(f"coordinator sent unexpected {kind!r}")


class Coordinator:
    """The coordinator's half: drives updates, combines in the declared order."""

    def __init__(self, spec: LearnerSpec, channels: dict[str, Channel]) -> None:
        self.spec = spec
        self.channels = channels

    def _collect_owned(self, chunks: dict[str, list[float]]) -> None:
        """Read each owner's partitioned state into its slot of ``chunks``, in owner order."""
        for index, role in enumerate(self.spec.owners):
            owned = self.channels[role].recv("owned")["state"]
            for name in chunks:
                chunks[name][index] = _unhex(owned[name])[0]

    def _combine(self, contributions: dict[str, dict[str, Any]]) -> list[float]:
        g_total = [0.0] * len(self.spec.owners)
        n_total = 0
        for role in self.spec.combine_order:
            c = contributions[role]
            g = _unhex(c["g"])
            for k in range(len(g_total)):
                g_total[k] = g_total[k] + g[k]
            n_total = n_total + int(c["n"])
        return [total / float(n_total) for total in g_total]

    def run(self, step: int, chunks: Chunks, updates: int) -> tuple[Chunks, list[dict[str, Any]], list[dict[str, Any]]]:
        """Run ``updates`` updates from ``(step, chunks)``; return final chunks, trajectory rows, owner reports."""
        lane = self.spec.lane
        owners = self.spec.owners
        chunks = {name: list(values) for name, values in chunks.items()}
        for index, role in enumerate(owners):
            shard = owner_shard(lane, chunks, index)
            self.channels[role].send({"type": "init", "step": step, "state": {k: _hex(v) for k, v in shard.items()}})
        rows: list[dict[str, Any]] = []
        for t in range(step + 1, step + updates + 1):
            if lane == "independent":
                for role in owners:
                    self.channels[role].send({"type": "advance", "step": t})
                self._collect_owned(chunks)
            else:
                for role in owners:
                    msg: dict[str, Any] = {"type": "forward", "step": t}
                    if lane == "partitioned":
                        msg["param"] = _hex(chunks["param"])
                    self.channels[role].send(msg)
                contributions = {role: self.channels[role].recv("contribution") for role in self.spec.combine_order}
                means = self._combine(contributions)
                if lane == "partitioned":
                    for index, role in enumerate(owners):
                        self.channels[role].send({"type": "apply", "step": t, "mean": _hex([means[index]])})
                    self._collect_owned(chunks)
                else:
                    for role in owners:
                        self.channels[role].send({"type": "apply", "step": t, "mean": _hex(means)})
                    replicas = [self.channels[role].recv("owned")["state"] for role in owners]
                    if any(r != replicas[0] for r in replicas[1:]):
                        raise WireError(f"replicas diverged at update {t}: {replicas}")
                    chunks = {name: _unhex(values) for name, values in replicas[0].items()}
            rows.append({"step": t, "chunks": {name: _hex(chunks[name]) for name in sorted(chunks)}})
        reports = []
        for role in owners:
            self.channels[role].send({"type": "finish"})
        for role in owners:
            reports.append(self.channels[role].recv("bye"))
        return chunks, rows, reports


def evaluate(spec: LearnerSpec, backend: Backend, chunks: Chunks) -> dict[str, Any]:
    """Predict (or pool) from a checkpoint's state, computing in ``backend``."""
    c = backend.const
    if spec.lane == "independent":
        v = [c(x) for x in chunks["state"]]
        pooled = c(0.0)
        total = 0
        for index, role in enumerate(spec.owners):
            n = len(spec.owner_samples(role))
            pooled = pooled + c(float(n)) * v[index]
            total = total + n
        pooled = pooled / c(float(total))
        return {"pooled": hexf(backend.read(pooled)), "resident": all(backend.resident(x) for x in v)}
    w = [c(x) for x in chunks["param"]]
    data_x, data_y = spec.data
    loss = c(0.0)
    predictions = []
    for x, y in zip(data_x, data_y, strict=True):
        pred = w[0] * c(x[0])
        for k in range(1, len(w)):
            pred = pred + w[k] * c(x[k])
        r = pred - c(y)
        loss = loss + r * r
        predictions.append(hexf(backend.read(pred)))
    loss = loss / c(float(len(data_y)))
    return {
        "predictions": predictions,
        "loss": hexf(backend.read(loss)),
        "resident": all(backend.resident(v) for v in w),
    }

"""Least-squares fits of step-time curves (pure Python): t = a + x*n, t = a + x*n + y*b, and the
convex t = a + x*n + y*n^2 (`fit_convex`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Curve:
    """t = a + x*n + y*batch seconds. Draft steps: n is the batch (y unused). Verify steps:
    n is the tokens scored and batch the sequences in the step; the two terms are the
    roofline's two costs (compute per token, KV-cache reads per sequence)."""

    a: float
    x: float
    source: str = "measured"  # measured | roofline
    y: float = 0.0

    def __call__(self, n: float, batch: float = 0.0) -> float:
        return self.a + self.x * max(n, 0.0) + self.y * max(batch, 0.0)


def fit_linear(points: Iterable[tuple[float, ...]], *, source: str = "measured") -> Curve:
    """Least-squares fit of t = a + x*n to (n, t) points; a and x clamped at >= 0.
    Optionally weighted: points given as (n, t, weight)."""
    pts = [(float(p[0]), float(p[1]), float(p[2]) if len(p) > 2 else 1.0) for p in points]
    if not pts:
        raise ValueError("no points to fit")
    sw = sum(w for *_, w in pts)
    mx = sum(w * n for n, _, w in pts) / sw
    mt = sum(w * t for _, t, w in pts) / sw
    sxx = sum(w * (n - mx) ** 2 for n, _, w in pts)
    if sxx <= 1e-18:  # one batch size only: all of it is fixed cost
        return Curve(max(mt, 0.0), 0.0, source)
    x = sum(w * (n - mx) * (t - mt) for n, t, w in pts) / sxx
    a = mt - x * mx
    if x < 0:
        x, a = 0.0, mt
    if a < 0:
        # refit through the origin
        x = sum(w * n * t for n, t, w in pts) / max(sum(w * n * n for n, _, w in pts), 1e-18)
        a = 0.0
    return Curve(a, x, source)


def fit_linear2(points: Iterable[tuple], *, source: str = "measured") -> Curve:
    """Least-squares fit of t = a + x*n + y*b to (n, b, t[, weight]) points, all
    coefficients >= 0 (a regressor whose coefficient comes out negative is dropped)."""
    pts = [
        (float(p[0]), float(p[1]), float(p[2]), float(p[3]) if len(p) > 3 else 1.0) for p in points
    ]
    if not pts:
        raise ValueError("no points to fit")
    sol = _lstsq([(1.0, n, b) for n, b, _, _ in pts], [t for *_, t, _ in pts], [w for *_, w in pts])
    if sol is not None and min(sol) >= 0:
        return Curve(sol[0], sol[1], source, sol[2])
    by_n = fit_linear([(n, t, w) for n, _, t, w in pts], source=source)
    by_b = fit_linear([(b, t, w) for _, b, t, w in pts], source=source)
    err_n = sum(w * (by_n(n) - t) ** 2 for n, _, t, w in pts)
    err_b = sum(w * (by_b(b) - t) ** 2 for _, b, t, w in pts)
    return by_n if err_n <= err_b else Curve(by_b.a, 0.0, source, by_b.x)


def _lstsq(rows: list[tuple[float, ...]], ys: list[float], ws: list[float]) -> list[float] | None:
    """Weighted normal equations, solved by Gaussian elimination; None if singular."""
    m = len(rows[0])
    A = [
        [sum(w * r[i] * r[j] for r, w in zip(rows, ws, strict=True)) for j in range(m)]
        for i in range(m)
    ]
    v = [sum(w * r[i] * y for r, y, w in zip(rows, ys, ws, strict=True)) for i in range(m)]
    for c in range(m):
        piv = max(range(c, m), key=lambda i: abs(A[i][c]))
        if abs(A[piv][c]) < 1e-18:
            return None
        A[c], A[piv], v[c], v[piv] = A[piv], A[c], v[piv], v[c]
        for i in range(m):
            if i != c:
                f = A[i][c] / A[c][c]
                A[i] = [a - f * b for a, b in zip(A[i], A[c], strict=True)]
                v[i] -= f * v[c]
    return [v[i] / A[i][i] for i in range(m)]


def fit_convex(points: list[tuple[float, float, float]]) -> Callable[[float], float]:
    """t = a + x*n + y*n^2 with x, y >= 0, weighted least squares over (n, t, weight); a
    straight line where there are fewer than three widths or the curve would bend down. A
    step's cost is convex in its tokens (flat while memory-bound, then rising): a straight
    line read the ends of that curve low (demo, batch 8: verify of 9 tokens at 17.7 ms
    where the cell read 20-24 ms), so k 8 looked cheap."""
    line = fit_linear(points)
    if len({n for n, _, _ in points}) < 3:
        return line
    sol = _lstsq(
        [(1.0, n, n * n) for n, _, _ in points],
        [t for _, t, _ in points],
        [w for _, _, w in points],
    )
    if sol is None or sol[1] < 0 or sol[2] < 0:
        return line
    a, x, y = sol
    return lambda n: a + x * n + y * n * n

"""`CostModel`: what one batch costs, and how many rows a batch may hold under its budget.

Every batch is a rectangle: ``rows`` rows padded to its ``longest`` (clipped) sample. Its
cost is ``rows x row_cost(longest)``, the cost of one row padded to ``longest``:

- default: ``row_cost(L) = L``, the budget is ``token_budget``: today's ``rows x longest``
  token budget, computed in integers (every output is what it was without a cost model);
- ``attention_weight = A``: ``row_cost(L) = L + A L^2``. The attention modelled is the
  padded one: every row of a padded batch attends over the batch's longest length (what
  dense attention on a padded batch computes), so a batch costs ``rows x (L + A L^2)``. A
  is the cost of one query-key pair relative to one token's linear (MLP + projections)
  cost: about ``1 / (6 d_model)`` for FLOPs of a standard transformer layer;
- ``varlen``, with ``A``: variable-length attention (FlashAttention's varlen kernels, a
  padding mask unpadded for attention): the linear layers still run on the padded rows, but
  each sample attends over its own length, so a batch costs ``rows x L + A x sum(len^2)``
  over its samples. A fixed batch size is still sized for the worst case (every sample at
  the bucket's longest); the ``sorted`` policy fills each batch while ``rows x L + A x
  sum(len^2)`` stays within the budget (`varlen_take`), and every reported cost is
  ``padded tokens + A x sum(len^2)``;
- ``curve``: ``row_cost(L)`` read off a measured table (length -> cost of one row at
  that padded length, seconds or bytes), linear between its points, the end segments
  extended beyond them (never below 0; one point: proportional to ``L``).

A sample may be several rows (``rows_per_sample``: a DPO sample is its prompt with each
answer, two rows padded to the batch's longest): a batch of ``n`` samples then holds ``n x
rows_per_sample`` rows, and the rows below count samples.

``budget`` is the most a batch may cost, in the model's unit (None: ``token_budget``; a
curve needs one). The rows a batch of longest ``L`` may hold are the most ``r <=
max_batch_size`` with ``r x row_cost(L) <= budget`` (``floor(budget / row_cost(L))``;
0 when one row is over the budget; ``max_batch_size`` when a row costs nothing). Every
place that sizes a batch (`batch_rows`) or prices one (`row_cost`) goes through this
module.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen

if TYPE_CHECKING:  # numpy is imported where a cost is computed: `--help` stays light
    import numpy as np

    from gpu_profiler.params import BucketParams

#: A cost-curve file is a small table: at most this many bytes, and this many points.
MAX_CURVE_BYTES = 1 << 20
MAX_CURVE_POINTS = 10_000
#: No length or cost of a curve, nor a budget, is larger (products stay exact in float64
#: far beyond any real batch).
MAX_VALUE = 1e15
#: Rows one sample may make (a DPO pair: 2).
MAX_ROWS_PER_SAMPLE = 16


@frozen
class CostModel:
    """The cost of a batch (see the module docstring).

    Attributes:
        attention_weight: ``A`` of ``row_cost(L) = L + A L^2`` (0: no attention term).
        curve: ``((length, cost), ...)``, lengths strictly increasing, costs non-decreasing
            (empty: no curve). Exclusive with ``attention_weight``.
        budget: the most a batch may cost, in ``unit`` (None: the token budget).
        unit: what a cost counts ("tokens" without a curve).
        rows_per_sample: rows a sample makes (2: a DPO pair), each padded to the longest.
        varlen: the attention term is ``A x sum(len^2)`` over a batch's samples, not ``A x
            rows x L^2`` (needs ``attention_weight``).
    """

    attention_weight: float = 0.0
    curve: tuple[tuple[int, float], ...] = ()
    budget: float | None = None
    unit: str = "tokens"
    rows_per_sample: int = 1
    varlen: bool = False

    def __post_init__(self) -> None:
        a = self.attention_weight
        if not _real(a) or a < 0:
            raise ProfilerError(f"attention-weight must be a finite number >= 0, got {a!r}")
        object.__setattr__(self, "attention_weight", float(a))
        curve = tuple(_point(pt, i) for i, pt in enumerate(self.curve))
        _check_curve(curve)
        object.__setattr__(self, "curve", curve)
        b = self.budget
        if b is not None:
            if not _real(b) or b <= 0:
                raise ProfilerError(f"cost-budget must be a finite number > 0, got {b!r}")
            object.__setattr__(self, "budget", float(b))
        if curve and self.attention_weight:
            raise ProfilerError("give a cost curve or an attention weight, not both (a "
                                "measured curve holds the attention already)")
        if curve and b is None:
            raise ProfilerError("a cost curve needs --cost-budget (cost_budget), the most a "
                                "batch may cost in the curve's unit")
        if not isinstance(self.unit, str) or not self.unit.strip() or len(self.unit) > 40:
            raise ProfilerError(f"a cost unit is a short name, got {self.unit!r}")
        if not curve:
            object.__setattr__(self, "unit", "tokens")
        if not isinstance(self.varlen, bool):
            raise ProfilerError(f"varlen must be True or False, got {self.varlen!r}")
        if self.varlen and not self.attention_weight:
            raise ProfilerError("varlen attention prices A x sum(len^2): it needs an "
                                "attention weight A > 0 (--attention-weight)")
        n = self.rows_per_sample
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ROWS_PER_SAMPLE:
            raise ProfilerError(f"rows per sample must be an integer in 1..{MAX_ROWS_PER_SAMPLE}"
                                f", got {n!r}")

    @property
    def is_default(self) -> bool:
        """Today's ``rows x longest`` under the token budget (nothing to report apart)."""
        return (not self.attention_weight and not self.curve and self.budget is None
                and self.rows_per_sample == 1)

    @property
    def kind(self) -> str:
        """``tokens``, ``attention``, ``varlen-attention`` or ``curve``."""
        return "curve" if self.curve else "varlen-attention" if self.varlen else \
            "attention" if self.attention_weight else "tokens"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "attention_weight": self.attention_weight,
                "curve": [[length, cost] for length, cost in self.curve] or None,
                "budget": self.budget, "unit": self.unit, "rows_per_sample": self.rows_per_sample,
                **({"varlen": True} if self.varlen else {})}


def _real(x: Any) -> bool:
    """A finite int or float (not a bool) of at most `MAX_VALUE`."""
    return not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) \
        and x <= MAX_VALUE


def _point(pt: Any, i: int) -> tuple[int, float]:
    try:
        length, cost = pt
    except (TypeError, ValueError):
        raise ProfilerError(f"cost curve point {i + 1}: expected (length, cost), got "
                            f"{_short(pt)}") from None
    if isinstance(length, bool) or isinstance(cost, bool):
        raise ProfilerError(f"cost curve point {i + 1}: not numbers: {_short(pt)}")
    try:
        lf, cf = float(length), float(cost)
    except (TypeError, ValueError, OverflowError):
        raise ProfilerError(f"cost curve point {i + 1}: not numbers: {_short(pt)}") from None
    if not (math.isfinite(lf) and lf == int(lf) and 1 <= lf <= MAX_VALUE):
        raise ProfilerError(f"cost curve point {i + 1}: the length must be a whole number "
                            f"of tokens in 1..{MAX_VALUE:.0e}, got {_short(length)}")
    if not (math.isfinite(cf) and 0 <= cf <= MAX_VALUE):
        raise ProfilerError(f"cost curve point {i + 1}: the cost must be a finite number in "
                            f"0..{MAX_VALUE:.0e}, got {_short(cost)}")
    return int(lf), cf


def _check_curve(curve: tuple[tuple[int, float], ...]) -> None:
    if len(curve) > MAX_CURVE_POINTS:
        raise ProfilerError(f"a cost curve holds at most {MAX_CURVE_POINTS:,} points, got "
                            f"{len(curve):,}")
    for i in range(1, len(curve)):
        (l0, c0), (l1, c1) = curve[i - 1], curve[i]
        if l1 <= l0:
            raise ProfilerError(f"cost curve lengths must be strictly increasing: {l0} then "
                                f"{l1} (point {i + 1})")
        if c1 < c0:
            raise ProfilerError(f"cost curve costs must not decrease with length: {c0:g} at "
                                f"{l0} then {c1:g} at {l1} (point {i + 1})")
    if curve and curve[-1][1] <= 0:
        raise ProfilerError("a cost curve whose every cost is 0 prices nothing")


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------- the cost function
def row_cost(lengths: Any, model: CostModel) -> Any:
    """The cost of one sample's rows padded to ``lengths`` (an int, or an int array:
    float64 array; without an attention term or a curve: the lengths times the rows a
    sample makes, integers)."""
    import numpy as np

    n = model.rows_per_sample
    x = np.asarray(lengths)
    if model.curve:
        xs = np.array([pt[0] for pt in model.curve], np.float64)
        ys = np.array([pt[1] for pt in model.curve], np.float64)
        xf = x.astype(np.float64)
        if xs.size == 1:
            out = ys[0] * (xf / xs[0])
        else:
            out = np.interp(xf, xs, ys)
            lo, hi = xf < xs[0], xf > xs[-1]
            out = np.where(lo, ys[0] + (xf - xs[0]) * ((ys[1] - ys[0]) / (xs[1] - xs[0])), out)
            out = np.where(hi, ys[-1] + (xf - xs[-1]) * ((ys[-1] - ys[-2])
                                                          / (xs[-1] - xs[-2])), out)
            out = np.maximum(out, 0.0)
    elif model.attention_weight:
        xf = x.astype(np.float64)
        out = xf + model.attention_weight * xf * xf
    else:
        return lengths if n == 1 else lengths * n
    out = out * n if n != 1 else out
    return float(out) if out.ndim == 0 else out


def padded_price(lengths: Any, model: CostModel) -> Any:
    """What one row padded to ``lengths`` costs apart from any per-sample term: `row_cost`,
    but ``rows_per_sample x L`` under varlen attention, whose ``A x len^2`` does not depend
    on how samples are batched (what a search for bounds prices)."""
    import numpy as np

    if model.varlen:
        return np.asarray(lengths, np.float64) * model.rows_per_sample
    return row_cost(lengths, model)


def varlen_cost(padded: float, sumsq: float, model: CostModel) -> float:
    """What batches of ``padded`` padded tokens whose samples' squared lengths sum to
    ``sumsq`` cost under a varlen model: ``rows_per_sample x (padded + A x sumsq)`` (the
    attention term does not depend on how the samples are batched)."""
    return model.rows_per_sample * (float(padded) + model.attention_weight * float(sumsq))


def squares(lengths: Any, counts: Any = None) -> float:
    """The lengths squared and summed (each ``counts`` times, when given), in float64: the
    ``sum(len^2)`` of the varlen attention term."""
    import numpy as np

    v = np.asarray(lengths, np.float64)
    return float((v * v).sum() if counts is None else np.asarray(counts) @ (v * v))


def varlen_take(rows: int, sumsq: float, length: int, most: int, p: BucketParams) -> int:
    """How many of ``most`` samples of ``length`` (at least the batch's longest) an open
    varlen batch of ``rows`` samples whose squared lengths sum to ``sumsq`` may still take:
    the most ``k`` with ``(rows + k) x length + A x (sumsq + k length^2)`` within the
    budget (per row a sample makes) and ``rows + k <= max_batch_size``. The same float
    operations as `gpu_profiler.kernels.plan.sorted_cuts`, so both batch alike."""
    a, limit, lf = p.cost.attention_weight, float(budget_of(p)) / p.cost.rows_per_sample, \
        float(length)
    top = min(most, p.max_batch_size - rows)
    if top <= 0:
        return 0
    if lf == 0:  # a sample of length 0 costs nothing (the batch's longest is 0 too)
        return top if a * sumsq <= limit else 0
    k = min(top, max(0, int((limit - rows * lf - a * sumsq) / (lf + a * lf * lf))))
    while k > 0 and (rows + k) * lf + a * (sumsq + k * lf * lf) > limit:
        k -= 1
    while k < top and (rows + k + 1) * lf + a * (sumsq + (k + 1) * lf * lf) <= limit:
        k += 1
    return k


def budget_of(p: BucketParams) -> float | int:
    """The most a batch may cost under ``p``, in its cost unit."""
    return p.token_budget if p.cost.budget is None else p.cost.budget


def budget_words(p: BucketParams) -> str:
    """How a message names the budget: the token budget, or the cost model's."""
    if p.cost.is_default:
        return f"token budget ({p.token_budget})"
    rows = f", {p.cost.rows_per_sample} rows a sample" if p.cost.rows_per_sample > 1 else ""
    return f"cost budget ({budget_of(p):g} {p.cost.unit} a batch, {p.cost.kind} cost{rows})"


def cost_words(model: CostModel, estimate: bool = False) -> str:
    """How a view's cost column is counted, in words: a bucket's estimate (``samples``
    at the bucket's max) or batches (``rows`` at each one's longest, summed)."""
    rows, at, summed = ("samples", "the bucket's max", "") if estimate else \
        ("rows", "the longest", ", summed over batches")
    if model.varlen:
        return f"{rows} x {at} + {model.attention_weight:g} x sum(length^2){summed}"
    return f"{rows} x row cost at {at}{summed}"


def budget_option(p: BucketParams) -> str:
    """The option that raises the budget."""
    return "--token-budget" if p.cost.budget is None else "--cost-budget"


def batch_rows(longest: int, p: BucketParams) -> int:
    """Rows per batch when its longest row is ``longest`` (0: one row is over the budget)."""
    if not longest:
        return p.max_batch_size
    if p.cost.is_default:
        return min(p.token_budget // longest, p.max_batch_size)
    return int(batch_rows_array([longest], p)[0])


def batch_rows_array(values: Any, p: BucketParams) -> np.ndarray:
    """`batch_rows` of every length in ``values`` (int64 array)."""
    import numpy as np

    values = np.asarray(values, np.int64)
    if p.cost.is_default:
        return np.where(values > 0, np.minimum(p.token_budget // np.maximum(values, 1),
                                               p.max_batch_size), p.max_batch_size)
    budget = float(budget_of(p))
    cost = np.asarray(row_cost(values, p.cost), np.float64)
    free = (cost <= 0) | (values <= 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.floor(budget / np.where(free, 1.0, cost))
    r = np.minimum(np.where(free, p.max_batch_size, r), p.max_batch_size)
    # floor(budget / cost) up to rounding: the largest r with r x cost <= budget, exactly
    r = np.where(~free & (r * cost > budget), r - 1, r)
    r = np.where(~free & (r < p.max_batch_size) & ((r + 1) * cost <= budget), r + 1, r)
    return np.maximum(r, 0).astype(np.int64)


# ---------------------------------------------------------------- reading a curve
def load_curve(path: str | os.PathLike[str]) -> tuple[tuple[tuple[int, float], ...], str]:
    """A cost curve and its unit from a small file: CSV (``length,<unit>`` header, then
    ``length,cost`` lines; ``#`` comments) or JSON (``{"unit": ..., "points": [[length,
    cost], ...]}`` or a bare list of pairs). Anything else is one clear `ProfilerError`."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read(MAX_CURVE_BYTES + 1)
    except OSError as exc:
        raise ProfilerError(f"cannot read the cost curve {name!r}: {exc.strerror or exc}"
                            ) from None
    if len(data) > MAX_CURVE_BYTES:
        raise ProfilerError(f"the cost curve {name!r} is over {MAX_CURVE_BYTES:,} bytes: a "
                            "cost curve is a small table (length -> cost)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProfilerError(f"the cost curve {name!r} is not UTF-8 text") from None
    stripped = text.strip()
    if not stripped:
        raise ProfilerError(f"the cost curve {name!r} is empty: give length,cost lines")
    if stripped[0] in "[{":
        points, unit = _json_curve(stripped, name)
    else:
        points, unit = _csv_curve(stripped, name)
    if not points:
        raise ProfilerError(f"the cost curve {name!r} holds no points: give length,cost lines")
    if len(points) > MAX_CURVE_POINTS:
        raise ProfilerError(f"the cost curve {name!r} holds {len(points):,} points, at most "
                            f"{MAX_CURVE_POINTS:,}")
    try:
        model = CostModel(curve=tuple(points), budget=1.0, unit=unit)
    except ProfilerError as exc:
        raise ProfilerError(f"the cost curve {name!r}: {exc}") from None
    return model.curve, model.unit


def _json_curve(text: str, name: str) -> tuple[list[Any], str]:
    try:
        doc = json.loads(text, parse_constant=lambda c: float(c))
    except (ValueError, RecursionError) as exc:
        raise ProfilerError(f"the cost curve {name!r} is not valid JSON: "
                            f"{str(exc).splitlines()[0]}") from None
    unit: Any = "cost"
    if isinstance(doc, dict):
        unit, doc = doc.get("unit", "cost"), doc.get("points")
    if not isinstance(doc, list):
        raise ProfilerError(f"the cost curve {name!r}: expected a list of [length, cost] "
                            "points (or {\"unit\": ..., \"points\": [...]})")
    if not isinstance(unit, str):
        raise ProfilerError(f"the cost curve {name!r}: its unit must be a string, got "
                            f"{_short(unit)}")
    return [pt if isinstance(pt, (list, tuple)) else (pt,) for pt in doc], unit


def _csv_curve(text: str, name: str) -> tuple[list[Any], str]:
    unit, points = "cost", list[Any]()
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 2:
            raise ProfilerError(f"the cost curve {name!r}, line {n}: expected length,cost, "
                                f"got {_short(line)}")
        if not points and unit == "cost" and not _number(cells[0]):
            unit = cells[1] or "cost"  # the header: length,<unit>
            continue
        if not (_number(cells[0]) and _number(cells[1])):
            raise ProfilerError(f"the cost curve {name!r}, line {n}: not numbers: "
                                f"{_short(line)}")
        points.append((float(cells[0]), float(cells[1])))
    return points, unit


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def cost_model(attention_weight: float | None = None, curve: Any = None,
               budget: float | None = None, unit: str | None = None,
               rows_per_sample: int = 1, varlen: bool = False) -> CostModel:
    """A `CostModel` from the options as given (``curve``: a path, or ``(length, cost)``
    pairs)."""
    points: Sequence[Any] = ()
    if isinstance(curve, (str, os.PathLike)):
        points, file_unit = load_curve(curve)
        unit = unit or file_unit
    elif curve is not None:
        points = tuple(curve)
    return CostModel(attention_weight=attention_weight or 0.0, curve=tuple(points),
                     budget=budget, unit=unit or "cost", rows_per_sample=rows_per_sample,
                     varlen=varlen)

"""Cost-aware hyperparameter search with Optuna (standard library plus Optuna; docs/run.md "Optuna").

Inside ``gpumeter run`` (or a notebook under ``%load_ext gpumeter``) each trial's cost is the meter's spend
between the trial's start and end (``gpumeter.spent_usd()``: the status file gpumeter rewrites every
metering interval, ``GPUMETER_STATUS_FILE``, or the notebook session's figures)::

    cost = gpumeter.optuna.CostCallback(budget_usd=5.0, max_trial_usd=0.50)
    study.optimize(cost.wrap(objective), n_trials=200, callbacks=[cost])

``wrap`` records ``trial.user_attrs["cost_usd"]`` (and ``wall_s``) when the trial ends, however it ends;
the callback stops the study (``study.stop()``) once the trials' spend reaches ``budget_usd``. Inside the
objective, ``cost.report(trial, step, total_steps)`` prunes the trial (``optuna.TrialPruned``) when its
forecast cost, spend so far / fraction done, exceeds ``max_trial_usd``. With ``target="loss<=0.2"``,
``cost.report(trial, step, total_steps, value=loss)`` also fits the trial's curve of that metric and prunes
it when the forecast cost of reaching the target exceeds the trial's share of the study's budget
(``max_trial_usd``, or what is left of ``budget_usd``), or when no fit reaches it within ``total_steps``.
Outside gpumeter there is no spend
to read: only wall time is recorded, ``cost_source`` says so and a warning is given once.
"""
import math
import time
import warnings

import gpumeter

__all__ = ["CostCallback", "cost_per_improvement", "parse_target", "forecast_reach_step"]


class CostCallback:
    """Records each trial's cost, stops the study at ``budget_usd``, prunes trials forecast to cost more
    than ``max_trial_usd``. Use ``wrap(objective)`` as the objective and the instance as a callback."""

    def __init__(self, budget_usd=None, max_trial_usd=None, target=None):
        for name, value in (("budget_usd", budget_usd), ("max_trial_usd", max_trial_usd)):
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of dollars, not {value!r}")
        self.budget_usd = budget_usd
        self.max_trial_usd = max_trial_usd
        self.target = parse_target(target) if target is not None else None
        self._curves = {}           # trial number -> [(step, value)] of the target's metric
        self.spent_usd = 0.0        # Σ cost of the finished trials seen
        self.trial_costs = {}       # trial number -> cost in dollars (None outside gpumeter)
        self.metered = gpumeter.metered()
        self._started = {}          # trial number -> (time.time(), spend at start or None)
        self._last_spend = gpumeter.spent_usd()  # for trials run without wrap(): spend between callbacks
        self._warned = False
        if not self.metered:
            self._warn()

    def _warn(self):
        if not self._warned:
            self._warned = True
            warnings.warn("gpumeter.optuna: not running under `gpumeter run` or the notebook extension: "
                          "recording wall time only; no cost_usd, budget_usd and max_trial_usd not enforced",
                          RuntimeWarning, stacklevel=3)

    def _begin(self, trial):
        self._started[trial.number] = (time.time(), gpumeter.spent_usd())

    def _trial_spend(self, number):
        """(wall seconds, dollars or None) of the running trial ``number`` so far."""
        t0, s0 = self._started.get(number, (None, None))
        if t0 is None:
            return None, None
        now = gpumeter.spent_usd()
        wall = time.time() - t0
        if s0 is None or now is None:
            return wall, None
        return wall, max(0.0, now - s0)

    def wrap(self, objective):
        """The objective with its trial's cost recorded in ``trial.user_attrs`` (``cost_usd``, ``wall_s``,
        ``cost_source``) before Optuna finishes the trial, whether it returns, is pruned or fails."""
        def wrapped(trial):
            self._begin(trial)
            try:
                return objective(trial)
            finally:
                wall, usd = self._trial_spend(trial.number)
                try:
                    trial.set_user_attr("wall_s", wall)
                    if usd is None:
                        self._warn()
                        trial.set_user_attr("cost_source", "wall time only (not metered by gpumeter)")
                    else:
                        trial.set_user_attr("cost_usd", usd)
                        trial.set_user_attr("cost_source", "gpumeter")
                except Exception:  # noqa: BLE001 - never turn a metering problem into a failed trial
                    pass
                self.trial_costs[trial.number] = usd
        wrapped.__name__ = getattr(objective, "__name__", "objective")
        return wrapped

    def report(self, trial, step, total_steps, value=None):
        """Inside the objective, after ``step`` of ``total_steps``: raises ``optuna.TrialPruned`` when the
        trial's forecast cost (spend so far × total_steps / step) exceeds ``max_trial_usd``, or (with a
        ``target`` and the metric's ``value``) when its forecast cost to reach the target exceeds its share
        of the study's budget. Returns the forecast in dollars (None outside gpumeter or before the first
        step)."""
        import optuna
        if trial.number not in self._started:
            self._begin(trial)
        if self.target is not None and value is not None and step:
            try:
                v = float(value)
                if math.isfinite(v):
                    self._curves.setdefault(trial.number, []).append((float(step), v))
            except (TypeError, ValueError):
                pass
        _, usd = self._trial_spend(trial.number)
        if usd is None or not step or not total_steps or step <= 0:
            return None
        if self.target is not None:
            self._prune_for_target(trial, step, total_steps, usd)
        forecast = usd * total_steps / step
        if self.max_trial_usd is not None and forecast > self.max_trial_usd:
            try:
                trial.set_user_attr("pruned_for_cost_usd", forecast)
            except Exception:  # noqa: BLE001
                pass
            raise optuna.TrialPruned(f"forecast cost ${forecast:.4f} over max_trial_usd ${self.max_trial_usd:.4f}")
        return forecast

    def share_usd(self):
        """A trial's share of the study's budget: ``max_trial_usd``, or what is left of ``budget_usd``
        (the smaller when both are given); None when neither is."""
        left = None if self.budget_usd is None else max(0.0, self.budget_usd - self.spent_usd)
        shares = [x for x in (self.max_trial_usd, left) if x is not None]
        return min(shares) if shares else None

    def _prune_for_target(self, trial, step, total_steps, usd):
        import optuna
        share = self.share_usd()
        points = self._curves.get(trial.number, [])
        if share is None or len(points) < 5 or step < 0.15 * total_steps:
            return
        metric, at_most, threshold = self.target
        reach = forecast_reach_step(points, at_most, threshold, total_steps)
        cost = math.inf if reach is None else usd * max(reach, step) / step
        try:
            trial.set_user_attr("forecast_cost_to_target_usd", None if math.isinf(cost) else cost)
        except Exception:  # noqa: BLE001
            pass
        if cost > share:
            try:
                trial.set_user_attr("pruned_for_target_cost_usd", None if math.isinf(cost) else cost)
            except Exception:  # noqa: BLE001
                pass
            what = (f"not reached within {total_steps} steps" if math.isinf(cost)
                    else f"forecast cost to reach it ${cost:.4f}")
            raise optuna.TrialPruned(f"{metric}{'<=' if at_most else '>='}{threshold:g}: {what}, over the "
                                     f"trial's share of the budget ${share:.4f}")

    def __call__(self, study, trial):
        """Optuna study callback: adds the finished trial's cost and stops the study at the budget."""
        now = gpumeter.spent_usd()
        usd = trial.user_attrs.get("cost_usd", self.trial_costs.get(trial.number))
        if usd is None and now is not None and self._last_spend is not None:
            usd = max(0.0, now - self._last_spend)  # not wrapped: the spend since the previous trial ended
        self._last_spend = now
        if usd is None:
            return
        self.trial_costs[trial.number] = usd
        self.spent_usd += usd
        if self.budget_usd is not None and self.spent_usd >= self.budget_usd:
            try:
                study.set_user_attr("gpumeter_stopped_at_usd", self.spent_usd)
            except Exception:  # noqa: BLE001
                pass
            study.stop()


def parse_target(text):
    """``"loss<=0.2"`` / ``"acc>=0.9"`` / ``"acc=0.9"`` -> (metric, at_most, threshold); ValueError otherwise."""
    for op, at_most in (("<=", True), (">=", False), ("=", False)):
        if op in text:
            name, _, value = text.partition(op)
            name = name.strip()
            try:
                threshold = float(value)
            except ValueError:
                break
            if name and math.isfinite(threshold):
                return name, at_most, threshold
            break
    raise ValueError(f"target {text!r}: expected METRIC<=VALUE or METRIC>=VALUE, e.g. loss<=0.2")


def _linear_fit(g, y):
    n = len(g)
    sg, sy = sum(g), sum(y)
    sgg = sum(x * x for x in g)
    sgy = sum(a * b for a, b in zip(g, y))
    det = n * sgg - sg * sg
    if abs(det) < 1e-300:
        return None
    b = (n * sgy - sg * sy) / det
    return (sy - b * sg) / n, b


def forecast_reach_step(points, at_most, threshold, horizon):
    """The most optimistic step in (last step, horizon] at which a plausible fit of the curve (power law
    with an offset or exponential, each over a grid of its shape; plausible: squared error within 1.6× of
    the best) meets the target; the last step when the fit meets it already; None when none does."""
    points = sorted(points)
    steps = [p[0] for p in points]
    values = [p[1] for p in points]
    last = steps[-1]
    scale = max(1.0, last)
    fits = []
    shapes = [("power", c * scale, a) for a in (0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0)
              for c in (0.01, 0.1, 0.3, 1.0)]
    shapes += [("exp", 0.0, k / scale) for k in (0.2, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 12.0)]

    def basis(kind, c, r, s):
        return (s + c) ** -r if kind == "power" else math.exp(-r * s)

    for kind, c, r in shapes:
        g = [basis(kind, c, r, s) for s in steps]
        ab = _linear_fit(g, values)
        if ab is None:
            continue
        a, b = ab
        sse = sum((v - a - b * x) ** 2 for v, x in zip(values, g))
        fits.append((sse, kind, c, r, a, b))
    if not fits:
        return None
    best = min(f[0] for f in fits)

    def met(v):
        return v <= threshold if at_most else v >= threshold

    reach = None
    for sse, kind, c, r, a, b in fits:
        if sse > 1.6 * best + 1e-12:
            continue
        value = lambda s: a + b * basis(kind, c, r, s)  # noqa: E731
        if met(value(last)):
            return last
        if not met(value(horizon)):
            continue
        lo, hi = last, float(horizon)
        while hi - lo > 0.5:
            mid = (lo + hi) / 2
            if met(value(mid)):
                hi = mid
            else:
                lo = mid
        reach = hi if reach is None else min(reach, hi)
    return reach


def cost_per_improvement(study):
    """Dollars per unit of objective gained over the study's finished trials, in trial order: the cost of
    every trial (``cost_usd``) divided by how far the best value moved from the first trial's value. Returns
    a dict: ``cost_usd``, ``first_value``, ``best_value``, ``improvement``, ``usd_per_unit`` (None when
    nothing improved or no cost is known), ``trials`` and ``improvements`` (one entry per new best: trial,
    value, cumulative cost_usd)."""
    import optuna
    minimize = study.direction == optuna.study.StudyDirection.MINIMIZE
    trials = sorted((t for t in study.trials if t.state.is_finished()), key=lambda t: t.number)
    total, known = 0.0, False
    first = best = None
    improvements = []
    for t in trials:
        usd = t.user_attrs.get("cost_usd")
        if usd is not None:
            total += usd
            known = True
        if t.state != optuna.trial.TrialState.COMPLETE or t.value is None:
            continue
        if first is None:
            first = best = t.value
            improvements.append({"trial": t.number, "value": t.value, "cost_usd": total if known else None})
        elif (t.value < best) if minimize else (t.value > best):
            best = t.value
            improvements.append({"trial": t.number, "value": t.value, "cost_usd": total if known else None})
    gained = abs(best - first) if first is not None else 0.0
    return {
        "cost_usd": total if known else None,
        "first_value": first,
        "best_value": best,
        "improvement": gained,
        "usd_per_unit": total / gained if known and gained > 0 else None,
        "trials": len(trials),
        "improvements": improvements,
    }

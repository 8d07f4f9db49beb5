"""A real Optuna study for OptunaIntegrationTest: trials that hold the (fake) GPU for a known time, a $
budget, and a second study whose long trials are pruned for their forecast cost. Prints one JSON line."""
import json
import sys
import time

import optuna

import gpumeter
import gpumeter.optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)
trial_s, budget_usd, max_trial_usd = (float(a) for a in sys.argv[1:4])

cost = gpumeter.optuna.CostCallback(budget_usd=budget_usd)


def objective(trial):
    x = trial.suggest_float("x", -10, 10)
    time.sleep(trial_s)
    return (x - 2) ** 2


study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
study.optimize(cost.wrap(objective), n_trials=100, callbacks=[cost])

pruning = gpumeter.optuna.CostCallback(max_trial_usd=max_trial_usd)


def long_objective(trial):
    x = trial.suggest_float("x", -10, 10)
    for step in range(1, 11):
        time.sleep(trial_s / 4)
        pruning.report(trial, step, 10)
    return x * x


pruned = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
pruned.optimize(pruning.wrap(long_objective), n_trials=2, callbacks=[pruning])

print(json.dumps({
    "metered": cost.metered,
    "trials": [{"number": t.number, "state": t.state.name, "value": t.value, "user_attrs": t.user_attrs}
               for t in study.trials],
    "spent_usd": cost.spent_usd,
    "study_user_attrs": study.user_attrs,
    "pruned": [{"state": t.state.name, "user_attrs": t.user_attrs} for t in pruned.trials],
    "per_improvement": gpumeter.optuna.cost_per_improvement(study),
}), flush=True)

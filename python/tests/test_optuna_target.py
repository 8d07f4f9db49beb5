"""The Optuna callback's target pruning (docs/run.md "Optuna"): a trial whose forecast cost to reach the
target exceeds its share of the study's budget is pruned; one that gets there in time is not."""
import math
import unittest
from unittest import mock

import gpumeter
from gpumeter import optuna as gm_optuna

try:
    import optuna
except ImportError:  # python3-optuna: scripts/setup.sh installs it
    optuna = None


class ReachStepTest(unittest.TestCase):
    def test_reach_step_of_known_curves(self):
        power = [(s, 2 + 3 / math.sqrt(s + 20)) for s in range(10, 410, 10)]
        reach = gm_optuna.forecast_reach_step(power, True, 2.12, 1000)  # the curve meets it at step 605
        self.assertIsNotNone(reach)
        self.assertGreater(reach, 400)
        self.assertLess(reach, 700)
        self.assertIsNone(gm_optuna.forecast_reach_step(power, True, 1.9, 1000))  # under its floor of 2.0
        acc = [(s, 0.9 - 0.8 * math.exp(-s / 300)) for s in range(10, 410, 10)]
        self.assertLess(abs(gm_optuna.forecast_reach_step(acc, False, 0.85, 1000) - 832), 150)

    def test_parse_target(self):
        self.assertEqual(gm_optuna.parse_target("loss<=0.2"), ("loss", True, 0.2))
        self.assertEqual(gm_optuna.parse_target("acc=0.9"), ("acc", False, 0.9))
        with self.assertRaises(ValueError):
            gm_optuna.parse_target("loss<0.2")


@unittest.skipIf(optuna is None, "python3-optuna is not installed (scripts/setup.sh installs it)")
class OptunaTargetPruningTest(unittest.TestCase):
    def test_prunes_trials_whose_cost_to_target_exceeds_their_share(self):
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        spend = {"usd": 0.0}
        # A metered run at $0.001 a step: spent_usd() is the meter's figure.
        with mock.patch.object(gpumeter, "metered", return_value=True), \
                mock.patch.object(gpumeter, "spent_usd", side_effect=lambda: spend["usd"]):
            cost = gm_optuna.CostCallback(budget_usd=1.5, target="loss<=2.12")

            def objective(trial):
                floor = trial.suggest_categorical("floor", [2.0, 2.1])  # 2.1: the target is out of reach
                loss = None
                for step in range(1, 1001):
                    spend["usd"] += 0.001
                    loss = floor + 3 / math.sqrt(step + 20)
                    if step % 10 == 0:
                        cost.report(trial, step, 1000, value=loss)
                    if loss <= 2.12:
                        break
                return loss

            study = optuna.create_study(sampler=optuna.samplers.GridSampler({"floor": [2.0, 2.1]}))
            study.optimize(cost.wrap(objective), n_trials=2, callbacks=[cost])
        by_floor = {t.params["floor"]: t for t in study.trials}
        reachable, unreachable = by_floor[2.0], by_floor[2.1]
        self.assertEqual(reachable.state, optuna.trial.TrialState.COMPLETE)
        self.assertLess(reachable.user_attrs["cost_usd"], 0.7)  # met at step 605: $0.605
        self.assertEqual(unreachable.state, optuna.trial.TrialState.PRUNED)
        # Pruned before half its steps: about $0.50 or less spent on a trial that could never get there.
        self.assertLess(unreachable.user_attrs["cost_usd"], 0.5)
        self.assertIn("pruned_for_target_cost_usd", unreachable.user_attrs)

    def test_prunes_a_reachable_trial_that_costs_more_than_whats_left(self):
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        spend = {"usd": 0.0}
        with mock.patch.object(gpumeter, "metered", return_value=True), \
                mock.patch.object(gpumeter, "spent_usd", side_effect=lambda: spend["usd"]):
            # Reaching loss<=2.12 takes 605 steps, $0.605; only $0.40 of the budget is left for it.
            cost = gm_optuna.CostCallback(budget_usd=0.4, target="loss<=2.12")

            def objective(trial):
                trial.suggest_float("x", 0, 1)
                for step in range(1, 1001):
                    spend["usd"] += 0.001
                    loss = 2.0 + 3 / math.sqrt(step + 20)
                    if step % 10 == 0:
                        cost.report(trial, step, 1000, value=loss)
                return loss

            study = optuna.create_study()
            study.optimize(cost.wrap(objective), n_trials=1, callbacks=[cost])
        t = study.trials[0]
        self.assertEqual(t.state, optuna.trial.TrialState.PRUNED)
        self.assertGreater(t.user_attrs["pruned_for_target_cost_usd"], 0.4)
        self.assertLess(t.user_attrs["cost_usd"], 0.4)


if __name__ == "__main__":
    unittest.main()

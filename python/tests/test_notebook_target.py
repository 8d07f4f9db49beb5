"""%gpumeter --target: validated, passed to `gpumeter attach`, shown on the badge (docs/notebooks.md)."""
import io
import unittest
from contextlib import redirect_stderr
from unittest import mock

try:
    from gpumeter import notebook
except ImportError:  # IPython: python3-ipykernel, which scripts/setup.sh installs
    notebook = None


@unittest.skipIf(notebook is None, "IPython is not installed (scripts/setup.sh installs python3-ipykernel)")
class NotebookTargetTest(unittest.TestCase):
    def setUp(self):
        self.session = notebook._Session(mock.MagicMock(user_ns={}))
        notebook._session = self.session

    def tearDown(self):
        notebook._session = None

    def test_target_goes_to_attach_and_bad_targets_are_refused(self):
        with redirect_stderr(io.StringIO()), mock.patch("builtins.print"):
            notebook._magic("--target loss<=2.2")
        self.assertEqual(self.session.target, "loss<=2.2")
        args = self.session.command("/usr/bin/gpumeter")
        self.assertEqual(args[args.index("--target") + 1], "loss<=2.2")
        err = io.StringIO()
        with redirect_stderr(err):
            notebook._magic("--target loss<2")
        self.assertIn("expected METRIC<=VALUE", err.getvalue())
        self.assertEqual(self.session.target, "loss<=2.2")

    def test_badge_shows_the_target_field(self):
        self.session.started = True
        self.session.state = {"spent_usd": 0.05, "target": {"text": "loss 2.57 → 2.2 at ~step 390, $0.17 in all "
                                                                   "[$0.14–$0.21]", "verdict": "on_track"}}
        self.assertIn("loss 2.57 → 2.2 at ~step 390", repr(self.session.badge()))


if __name__ == "__main__":
    unittest.main()

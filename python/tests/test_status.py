import json
import os
import tempfile
import time
import unittest
from unittest import mock

import gpumeter


class StatusFileTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "status.json")

    def tearDown(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        os.rmdir(self.dir)

    def write(self, **doc):
        with open(self.path, "w", encoding="utf-8") as f:
            json.dump(doc, f)

    def test_none_outside_gpumeter(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertIsNone(gpumeter.status())
            self.assertIsNone(gpumeter.spent_usd())

    def test_spend_is_the_meters_figure_plus_the_burn_since_it_was_written(self):
        now = time.time()
        self.write(version=1, spent_micros=2_500_000, spent_usd=2.5, burn_usd_per_s=0.01,
                   written_unix_ms=int((now - 10) * 1000))
        with mock.patch.dict(os.environ, {"GPUMETER_STATUS_FILE": self.path}):
            self.assertEqual(gpumeter.status()["spent_micros"], 2_500_000)
            self.assertAlmostEqual(gpumeter.spent_usd(now=now), 2.5 + 0.1, places=4)  # ms resolution
            # A meter that stopped writing is not extrapolated for more than a minute.
            self.assertAlmostEqual(gpumeter.spent_usd(now=now + 3600), 2.5 + 0.01 * 60, places=6)

    def test_no_price_no_spend_and_damaged_files_do_not_raise(self):
        self.write(version=1, spent_micros=None, written_unix_ms=0)
        with mock.patch.dict(os.environ, {"GPUMETER_STATUS_FILE": self.path}):
            self.assertIsNone(gpumeter.spent_usd())
            with open(self.path, "w", encoding="utf-8") as f:
                f.write('{"spent_micros": 12')
            self.assertIsNone(gpumeter.status())
            self.assertIsNone(gpumeter.spent_usd())
        with mock.patch.dict(os.environ, {"GPUMETER_STATUS_FILE": self.path + ".missing"}):
            self.assertIsNone(gpumeter.status())


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/env python3
"""Tests of scripts/check_money.py: the real tree passes; a copy with planted dollar arithmetic outside
src/meter (a burn rate, a difference, a product, a share, a cast, a conditional's amount, unary minus, a
compound assignment) fails with exit 1 and names the file and line; what is not arithmetic (a running total,
comparisons, passing to meter or a formatter, text concatenation, pointer declarations, SQL text) and the same
arithmetic inside src/meter pass.

Usage: check_money_test.py [ROOT]   (default: the repository around this script)
"""
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parent / 'check_money.py'
ROOT = pathlib.Path(sys.argv.pop(1)) if len(sys.argv) > 1 else SCRIPT.parent.parent


def run(root):
    r = subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, check=False)
    return r.returncode, r.stdout + r.stderr


class PlantedTree(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)
        shutil.copytree(ROOT / 'src', self.root / 'src')

    def tearDown(self):
        self.tmp.cleanup()

    def plant(self, relative, text):
        path = self.root / relative
        old = path.read_text(encoding='utf-8') if path.exists() else ''
        path.write_text(old + text, encoding='utf-8')
        return len((old + text).splitlines())

    def test_the_tree_as_it_is_passes(self):
        code, out = run(self.root)
        self.assertEqual(code, 0, out)

    def test_each_planted_computation_fails_naming_file_and_line(self):
        for where, text, what in [
            ('src/guard/supervisor.cpp',
             'double b(MicroUsd price_micros) { return micros_to_usd(price_micros) / 3600.0; }\n', '/ on'),
            ('src/report/html.cpp', 'MicroUsd w(const RunRecord& r) { return r.cost_micros - r.idle_cost_micros; }\n',
             '- on cost_micros'),
            ('src/agent/collector.cpp', 'MicroUsd m(MicroUsd board_micros, unsigned s) { return board_micros * s; }\n',
             '* on board_micros'),
            ('src/cli/cmd_budget.cpp', 'double p(double part_usd, double whole) { return 100 * part_usd / whole; }\n',
             'on part_usd'),
            ('src/findings/render.cpp',
             'double n(std::int64_t cost_nano_usd) { return static_cast<double>(cost_nano_usd) / 1e9; }\n',
             '/ on cost_nano_usd'),
            ('src/report/focus.cpp', 'MicroUsd c(bool a, MicroUsd x_micros) { return (a ? x_micros : 0) * 2; }\n',
             '* on x_micros'),
            ('src/report/gate.cpp', 'MicroUsd u(MicroUsd saved_micros) { return -saved_micros; }\n',
             'unary - on saved_micros'),
            ('src/guard/policy.cpp', 'void d(MicroUsd& left_micros, MicroUsd spent) { left_micros -= spent; }\n',
             '-= on left_micros'),
            ('src/plan/rank.cpp', 'double h(double usd_per_hour,\n         double hours) { return hours *\n'
             '  usd_per_hour; }\n', '* on usd_per_hour'),
            ('src/store/ledger_common.cpp',
             'void t(MicroUsd& total_micros, MicroUsd a, MicroUsd b) { total_micros += a * b; }\n',
             '+= of an arithmetic expression'),
            ('src/util/units.h', 'inline long k(long n) { return n * kMicrosPerUsd; }\n', '* on kMicrosPerUsd'),
        ]:
            with self.subTest(what=what, where=where):
                line = self.plant(where, text)
                code, out = run(self.root)
                self.assertEqual(code, 1, out)
                # A multi-line plant is reported at the operator's line.
                lines = [ln for ln in out.splitlines() if ln.startswith(where + ':')]
                self.assertTrue(lines, out)
                self.assertIn(what, out)
                reported = int(lines[0].split(':')[1])
                self.assertLessEqual(reported, line)
                self.assertGreater(reported, line - text.count('\n'))
                self.tearDown()
                self.setUp()

    def test_what_is_not_arithmetic_passes(self):
        self.plant('src/report/multi.cpp', '\n'.join([
            'void ok1(MicroUsd& total_micros, const RunRecord& r) { total_micros += r.cost_micros; }',
            'bool ok2(MicroUsd a_micros, MicroUsd b_micros) { return a_micros >= b_micros && a_micros != 0; }',
            'std::string ok3(MicroUsd cost_micros) { return "cost " + format_micros(cost_micros) + " in all"; }',
            'MicroUsd ok4(MicroUsd a_micros, MicroUsd b_micros) { return budget_left_micros(a_micros, b_micros); }',
            'const MicroUsd* ok5(const MicroUsd* spent_micros) { return spent_micros; }',
            'const char* ok6() { return "SELECT SUM(cost_micros) * 2 FROM runs"; }',
            'std::string ok7(std::optional<double> high_usd) {',
            '  return (high_usd ? "[" + format_usd(*high_usd) : std::string("none")) + "]"; }',
            'int ok8(int n) { return n * 2 - 1; }  // cost_micros * 2 in a comment',
            'std::string ok9(bool b_micros) { return std::string("x") + (b_micros ? "a" : "b"); }',
            '',
        ]))
        code, out = run(self.root)
        self.assertEqual(code, 0, out)

    def test_meter_itself_may_compute(self):
        self.plant('src/meter/dollars.cpp', 'MicroUsd x(MicroUsd a_micros) { return a_micros * 2 - 1; }\n')
        code, out = run(self.root)
        self.assertEqual(code, 0, out)

    def test_a_gone_exempt_file_is_reported(self):
        (self.root / 'src/util/money.cpp').unlink()
        code, out = run(self.root)
        self.assertEqual(code, 1, out)
        self.assertIn('src/util/money.cpp: exempt but gone', out)


if __name__ == '__main__':
    unittest.main()

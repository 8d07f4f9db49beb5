#!/usr/bin/env python3
"""Proves scripts/check_money.py can fail: the repository's src/ passes, and so does every form that is not
arithmetic (a running total, comparisons, passing to meter or a formatter, text, pointer declarations, SQL,
comments, meter itself); each planted computation on an amount outside src/meter (a burn rate, a difference,
a product, a share, a cast, a conditional's amount, unary minus, a compound assignment, a multi-line product)
fails with exit 1 naming the file and the operator's line, in a small tree and in a copy of the real one.

Usage: check_money_test.py [ROOT]   (default: the repository around this script)
"""
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

CHECK = pathlib.Path(__file__).resolve().parent / 'check_money.py'
REPO = pathlib.Path(sys.argv.pop(1)) if len(sys.argv) > 1 else CHECK.parent.parent

# One planted computation a line: file | text (⏎ for a line break; the operator on its last line) | finding.
PLANTED_TABLE = """
guard/supervisor.cpp | double b(MicroUsd price_micros) { return micros_to_usd(price_micros) / 3600.0; } | / on micros_to_usd
report/html.cpp | MicroUsd w(const RunRecord& r) { return r.cost_micros - r.idle_cost_micros; } | - on cost_micros
agent/collector.cpp | MicroUsd m(MicroUsd board_micros, unsigned s) { return board_micros * s; } | * on board_micros
cli/cmd_budget.cpp | double p(double part_usd, double whole) { return 100 * part_usd / whole; } | on part_usd
findings/render.cpp | double n(std::int64_t cost_nano_usd) { return static_cast<double>(cost_nano_usd) / 1e9; } | / on cost_nano_usd
report/focus.cpp | MicroUsd c(bool a, MicroUsd x_micros) { return (a ? x_micros : 0) * 2; } | * on x_micros
report/gate.cpp | MicroUsd u(MicroUsd saved_micros) { return -saved_micros; } | unary - on saved_micros
guard/policy.cpp | void d(MicroUsd& left_micros, MicroUsd s) { left_micros -= s; } | -= on left_micros
plan/rank.cpp | double h(double usd_per_hour,⏎  double hours) { return hours⏎  * usd_per_hour; } | * on usd_per_hour
store/ledger_common.cpp | void t(MicroUsd& total_micros, MicroUsd a, MicroUsd b) { total_micros += a * b; } | += of an arithmetic expression
guard/run_loop.cpp | MicroUsd s(const M& m) { return m.spent(1, false) - m.at; } | - on spent
util/units.h | inline long k(long n) { return n * kMicrosPerUsd; } | * on kMicrosPerUsd
catalog/catalog.cpp | double g(double price, int n) { return price / n; }  // check_money: allow | allow without a (reason)
"""
PLANTED = [tuple(cell.strip().replace('⏎', '\n') for cell in row.split(' | ')) for row in PLANTED_TABLE.strip().splitlines()]

NOT_ARITHMETIC = '\n'.join([
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
    'double ok10(double price_ratio) { return 1.0 - price_ratio; }',
    'const nlohmann::json* ok11(const nlohmann::json& j) { const nlohmann::json* price = &j; return price; }',
    'double ok12(double price, int n) { return price / n; }  // check_money: allow (catalog is below meter)',
    '',
])


def check(root):
    r = subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True, check=False)
    return r.returncode, r.stdout + r.stderr


def small_tree(files):
    """A temporary tree with src/util/money.{h,cpp} (the exempt files) and `files` {path under src: text}."""
    tmp = tempfile.TemporaryDirectory()
    src = pathlib.Path(tmp.name) / 'src'
    for rel, text in {'util/money.h': '', 'util/money.cpp': '', **files}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text + '\n', encoding='utf-8')
    return tmp


class MoneyCheck(unittest.TestCase):
    def test_the_repository_passes(self):
        code, out = check(REPO)
        self.assertEqual(code, 0, out)

    def test_each_planted_computation_fails_at_its_line(self):
        for rel, text, what in PLANTED:
            with self.subTest(what=what), small_tree({rel: 'int before = 1;\n' + text}) as tmp:
                code, out = check(tmp)
                self.assertEqual(code, 1, out)
                self.assertIn(f'src/{rel}:{1 + text.count(chr(10)) + 1}: ', out)
                self.assertIn(what, out)

    def test_what_is_not_arithmetic_passes(self):
        with small_tree({'report/multi.cpp': NOT_ARITHMETIC}) as tmp:
            code, out = check(tmp)
            self.assertEqual(code, 0, out)
            self.assertIn('1 line(s) allowed', out)

    def test_meter_itself_may_compute(self):
        with small_tree({'meter/dollars.cpp': 'MicroUsd x(MicroUsd a_micros) { return a_micros * 2 - 1; }'}) as tmp:
            self.assertEqual(check(tmp)[0], 0)

    def test_a_gone_exempt_file_is_reported(self):
        with small_tree({}) as tmp:
            (pathlib.Path(tmp) / 'src/util/money.cpp').unlink()
            code, out = check(tmp)
            self.assertEqual(code, 1, out)
            self.assertIn('src/util/money.cpp: exempt but gone', out)

    def test_a_copy_of_the_repository_with_a_burn_rate_in_guard_fails(self):
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(REPO / 'src', pathlib.Path(tmp) / 'src')
            target = pathlib.Path(tmp) / 'src/guard/supervisor.cpp'
            text = target.read_text(encoding='utf-8')
            target.write_text(text + 'double burn(MicroUsd price_micros) { return micros_to_usd(price_micros) / 3600; }\n',
                              encoding='utf-8')
            code, out = check(tmp)
            self.assertEqual(code, 1, out)
            self.assertIn(f'src/guard/supervisor.cpp:{len(text.splitlines()) + 1}: / on micros_to_usd', out)


if __name__ == '__main__':
    unittest.main()

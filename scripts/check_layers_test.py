#!/usr/bin/env python3
"""Tests of scripts/check_layers.py: the real tree passes; a copy of it with a planted sideways or upward
include, an unplaced module, a stale table edge, a colliding header name, printing in library code, or a file
declaring outside its module's namespace or re-exporting a util name that is not vocabulary into gm fails with
exit 1 and names the file.

Usage: check_layers_test.py [SRC_DIR]   (default: the src/ next to this script's folder)
"""
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parent / 'check_layers.py'
SRC = pathlib.Path(__file__).resolve().parent.parent / 'src'


def run(src):
    r = subprocess.run([sys.executable, str(SCRIPT), str(src)], capture_output=True, text=True, check=False)
    return r.returncode, r.stdout + r.stderr


class PlantedTree(unittest.TestCase):
    """Each test plants one change in a fresh copy of src/."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.src = pathlib.Path(self.tmp.name) / 'src'
        shutil.copytree(SRC, self.src)

    def tearDown(self):
        self.tmp.cleanup()

    def plant(self, relative, text):
        path = self.src / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        old = path.read_text(encoding='utf-8') if path.exists() else ''
        path.write_text(old + text, encoding='utf-8')
        return len((old + text).splitlines())

    def test_the_tree_as_it_is_passes(self):
        code, out = run(self.src)
        self.assertEqual(code, 0, out)
        self.assertIn('each allowed and downward', out)

    def test_a_sideways_include_fails(self):
        line = self.plant('gpu/gpu.cpp', '#include "sys/proc.h"\n')
        code, out = run(self.src)
        self.assertEqual(code, 1, out)
        self.assertIn(f'src/gpu/gpu.cpp:{line}: gpu includes sys (sideways)', out)

    def test_an_upward_include_fails(self):
        line = self.plant('meter/price.cpp', '#include "report/run_report.h"\n')
        code, out = run(self.src)
        self.assertEqual(code, 1, out)
        self.assertIn(f'src/meter/price.cpp:{line}: meter includes report (upward)', out)

    def test_an_include_down_that_the_table_does_not_allow_fails(self):
        line = self.plant('trace/io.cpp', '#include "util/money.h"\n#include "store/store.h"\n')
        code, out = run(self.src)
        self.assertEqual(code, 1, out)
        self.assertIn(f'src/trace/io.cpp:{line}: trace includes store (sideways)', out)
        self.plant('serving/engines.cpp', '#include "gpu/gpu.h"\n')
        code, out = run(self.src)
        self.assertIn('serving includes gpu (not an allowed edge)', out)

    def test_a_module_the_table_does_not_place_fails(self):
        self.plant('billing/billing.h', '#pragma once\n#include "util/money.h"\n')
        code, out = run(self.src)
        self.assertEqual(code, 1, out)
        self.assertIn('src/billing: a module the table in scripts/check_layers.py does not place', out)

    def test_an_edge_no_file_uses_any_more_fails(self):
        for path in (self.src / 'guard').rglob('*'):
            if path.suffix in ('.h', '.cpp'):
                text = path.read_text(encoding='utf-8')
                path.write_text(text.replace('#include "serving/serving.h"\n', ''), encoding='utf-8')
        code, out = run(self.src)
        self.assertEqual(code, 1, out)
        self.assertIn('ALLOWED lets guard include serving, but no file of src/guard does', out)

    def test_a_header_name_of_two_modules_fails(self):
        self.plant('report/cmd_gpus.h', '#pragma once\n')
        code, out = run(self.src)
        self.assertEqual(code, 1, out)
        self.assertIn('src/report/cmd_gpus.h: header name also used by src/cli/cmd_gpus.cpp', out)

    def test_a_cli_file_named_after_a_module_header_fails(self):
        self.plant('cli/plan.cpp', '\n')
        code, out = run(self.src)
        self.assertEqual(code, 1, out)
        self.assertIn('src/plan/plan.h: header name also used by src/cli/plan.cpp', out)

    def test_printing_in_library_code_fails(self):
        line = self.plant('meter/price.cpp', 'static void f() { std::puts("x"); }\n')
        code, out = run(self.src)
        self.assertEqual(code, 1, out)
        self.assertIn(f'src/meter/price.cpp:{line}: prints outside src/cli', out)

    def assert_outside_namespace(self, relative, text, at, message):
        """Plants TEXT at the end of RELATIVE; the check fails naming line AT of it (from the end when < 1)."""
        line = self.plant(relative, text)
        code, out = run(self.src)
        self.assertEqual(code, 1, out)
        self.assertIn(f'src/{relative}:{at if at > 0 else line + at}: {message}', out)

    def test_a_header_in_bare_gm_fails(self):
        self.assert_outside_namespace('trace/planted.h', '#pragma once\nnamespace gm {\nint planted_rate();\n}\n', 2,
                                      'declares in namespace gm, not gm::trace')

    def test_a_header_in_another_modules_namespace_fails(self):
        self.assert_outside_namespace('plan/planted.h', '#pragma once\nnamespace gm::meter {\nstruct P {};\n}\n', 2,
                                      'declares in namespace gm::meter, not gm::plan')

    def test_a_declaration_outside_any_namespace_fails(self):
        self.assert_outside_namespace('serving/planted.h', '#pragma once\n// namespace gm::serving {\nint f();\n', 3,
                                      'declares outside namespace gm::serving')

    def test_a_source_file_defining_in_bare_gm_fails(self):
        self.assert_outside_namespace('meter/price.cpp', 'namespace gm {\nint planted_rate() { return 1; }\n}\n', -2,
                                      'declares in namespace gm, not gm::meter')

    def test_a_file_level_anonymous_namespace_fails(self):
        self.assert_outside_namespace('store/spool.cpp', 'namespace {\nint planted() { return 1; }\n}\n', -2,
                                      'declares in namespace (anonymous), not gm::store')

    def test_a_reexport_of_a_util_name_that_is_not_vocabulary_fails(self):
        self.assert_outside_namespace('util/money.h', 'namespace gm {\nusing util::format_usd;\n}\n', -2,
                                      'declares in namespace gm, not gm::util')

    def test_the_vocabulary_reexports_outside_their_header_fail(self):
        self.assert_outside_namespace('util/planted.h', '#pragma once\nnamespace gm {\nusing util::Result;\n}\n', 2,
                                      'declares in namespace gm, not gm::util')

    def test_forward_declarations_and_nested_namespaces_pass(self):
        self.plant('agent/planted.h', '#pragma once\nstruct sqlite3;\nextern char** environ;\n'
                   'namespace gm::catalog {\nclass Catalog;\n}\n'
                   'namespace gm::agent::detail {\ninline int planted() { return 1; }\n}\n')
        self.plant('agent/planted.cpp', 'namespace gm::agent {\nnamespace {\nint planted() { return 2; }\n}\n}\n')
        code, out = run(self.src)
        self.assertEqual(code, 0, out)


if __name__ == '__main__':
    if len(sys.argv) > 1 and not sys.argv[1].startswith('-'):
        SRC = pathlib.Path(sys.argv.pop(1)).resolve()
    unittest.main()

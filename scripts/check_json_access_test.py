#!/usr/bin/env python3
"""Tests of scripts/check_json_access.py: the real tree passes; a copy with a planted throwing read of
outside JSON (value(), at(), get<T>(), a const operator[] read, a throwing json::parse) fails with exit 1 and
names the file and line; building output with operator[] stays allowed.

Usage: check_json_access_test.py [ROOT]   (default: the repository around this script)
"""
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parent / 'check_json_access.py'
ROOT = pathlib.Path(sys.argv.pop(1)) if len(sys.argv) > 1 else SCRIPT.parent.parent


def run(root):
    r = subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, check=False)
    return r.returncode, r.stdout + r.stderr


class PlantedTree(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)
        shutil.copytree(ROOT / 'src', self.root / 'src')
        shutil.copytree(ROOT / 'tests' / 'fake_nvml', self.root / 'tests' / 'fake_nvml')

    def tearDown(self):
        self.tmp.cleanup()

    def plant(self, relative, text):
        path = self.root / relative
        old = path.read_text(encoding='utf-8')
        path.write_text(old + text, encoding='utf-8')
        return len((old + text).splitlines())

    def test_the_tree_as_it_is_passes(self):
        code, out = run(self.root)
        self.assertEqual(code, 0, out)

    def test_each_throwing_read_fails_naming_file_and_line(self):
        for text, what in [
            ('int a(const nlohmann::json& m) { return m.value("annotations", 0); }\n', 'value('),
            ('int b(const nlohmann::json& m) { return m.at("items").size(); }\n', 'at()'),
            ('std::string c(const nlohmann::json& m) { return m.get<std::string>(); }\n', 'get<T>()'),
            ('bool d(const nlohmann::json& m) { return m["items"].is_array(); }\n', 'operator[]'),
            ('auto e(const std::string& t) { return nlohmann::json::parse(t); }\n', 'json::parse'),
        ]:
            with self.subTest(what=what):
                line = self.plant('src/serving/discovery.cpp', text)
                code, out = run(self.root)
                self.assertEqual(code, 1, out)
                self.assertIn(f'src/serving/discovery.cpp:{line}:', out)
                self.assertIn(what, out)
                self.tearDown()
                self.setUp()

    def test_the_fake_nvml_scenario_parser_is_checked(self):
        line = self.plant('tests/fake_nvml/scenario.cpp', 'int f(const json& j) { return j.at(0).get<int>(); }\n')
        code, out = run(self.root)
        self.assertEqual(code, 1, out)
        self.assertIn(f'tests/fake_nvml/scenario.cpp:{line}:', out)

    def test_building_output_with_subscripts_passes(self):
        self.plant('src/serving/discovery.cpp',
                   'nlohmann::json g() { nlohmann::json j; j["a"]["b"] = 1; j["c"] =\n  2; '
                   'j["d"].push_back(3); return j; }\n')
        code, out = run(self.root)
        self.assertEqual(code, 0, out)


if __name__ == '__main__':
    unittest.main()

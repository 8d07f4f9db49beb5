#!/usr/bin/env python3
"""Proves scripts/check_http_client.py can fail: the repository as it is passes, and so does a test server
(httplib::Server); a copy with a planted cpp-httplib client (httplib::Client, SSLClient, Result, Error,
to_string of an error) outside src/util/http_client.cpp, or an include of <httplib.h> in a file that serves
nothing, fails with exit 1 naming the file and line.

Usage: check_http_client_test.py [ROOT]   (default: the repository around this script)
"""
import pathlib, shutil, subprocess, sys, tempfile, unittest

CHECK = pathlib.Path(__file__).resolve().parent / 'check_http_client.py'
REPO = pathlib.Path(sys.argv.pop(1)) if len(sys.argv) > 1 else CHECK.parent.parent


def check_with(edits):
    """Runs the check on a copy of the repository's C++ sources with `edits` applied: (path, text, at_top)
    appends (or prepends) text to a file, creating it. Returns (exit code, output, {path: planted line})."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        keep_sources = shutil.ignore_patterns('*.json', '*.csv', '*.py', '*.txt', '*.gz', '*.pb', '*.trace',
                                              '*.toml', '*.html', '*.md', '*.sh', '*.bin')
        for folder in ('src', 'tests', 'fuzz'):
            if (REPO / folder).is_dir():
                shutil.copytree(REPO / folder, root / folder, ignore=keep_sources)
        lines = {}
        for relative, text, at_top in edits:
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            before = target.read_text(encoding='utf-8') if target.exists() else ''
            lines[relative] = 1 if at_top else before.count('\n') + 1
            target.write_text(text + before if at_top else before + text, encoding='utf-8')
        done = subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True,
                              check=False)
        return done.returncode, done.stdout + done.stderr, lines


class PlantedClients(unittest.TestCase):
    def test_the_repository_passes(self):
        code, out, _ = check_with([])
        self.assertEqual(code, 0, out)

    def test_each_client_type_fails_where_it_is_named(self):
        planted = [
            ('src/serving/engines.cpp', 'int f() { httplib::Client c("http://x"); return 0; }\n', 'Client'),
            ('src/prices/http.cpp', 'void g() { httplib::SSLClient c("x", 443); }\n', 'SSLClient'),
            ('src/cloud/poll.cpp', 'bool h(const httplib::Result& r) { return !r; }\n', 'Result'),
            ('src/report/fleet.cpp', 'std::string e(httplib::Error x) { return httplib::to_string(x); }\n',
             'Error'),
            ('tests/unit/guard_test.cpp', 'void t() { httplib::Client c("http://127.0.0.1:1"); }\n', 'Client'),
        ]
        for relative, text, type_name in planted:
            with self.subTest(relative=relative, type_name=type_name):
                code, out, lines = check_with([(relative, text, False)])
                self.assertEqual(code, 1, out)
                self.assertIn(f'{relative}:{lines[relative]}: names httplib::{type_name},', out)

    def test_an_include_in_a_file_that_serves_nothing_fails(self):
        code, out, _ = check_with([('src/guard/notify.cpp', '#include <httplib.h>\n', True)])
        self.assertEqual(code, 1, out)
        self.assertIn('src/guard/notify.cpp:1: includes <httplib.h> without serving', out)

    def test_a_server_and_words_in_comments_or_strings_pass(self):
        server = ('#include <httplib.h>\n// unlike httplib::Client, a server stays\n'
                  'void s() { httplib::Server srv; srv.Get("/x", nullptr); }\n'
                  'const char* k = "httplib::Client";\n')
        code, out, _ = check_with([('tests/unit/new_server_test.cpp', server, False)])
        self.assertEqual(code, 0, out)


if __name__ == '__main__':
    unittest.main()

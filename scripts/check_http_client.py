#!/usr/bin/env python3
"""One HTTP client seam: every request gpumeter sends goes through util::HttpClient
(src/util/http_client.h), whose real implementation in src/util/http_client.cpp is the only file that builds
a cpp-httplib client.

A file of src/, tests/, fuzz/ or bench/ other than src/util/http_client.cpp fails when it names a cpp-httplib
client type (httplib::Client, SSLClient, ClientImpl, Result, Error, to_string of an error) or includes
<httplib.h> without serving (naming httplib::Server or SSLServer): servers (the agent's /metrics server, tests' local
stand-ins) keep cpp-httplib; clients do not. Tests send through the real SystemHttpClient or the fake in
tests/support/fake_http.h.

Usage: check_http_client.py ROOT   (the repository root)
Exit 0 clean, 1 with one line per finding
"FILE:LINE: what — send through util::HttpClient (util/http_client.h)".
"""
import argparse
import pathlib
import re
import sys

SEAM = 'src/util/http_client.cpp'
DIRS = ('src', 'tests', 'fuzz', 'bench')
SUFFIXES = ('.cpp', '.h', '.hpp', '.cc')
CLIENT = re.compile(r'\bhttplib::(Client|SSLClient|ClientImpl|Result|Error|to_string)\b')
SERVER = re.compile(r'\bhttplib::(Server|SSLServer)\b')
INCLUDE = re.compile(r'#\s*include\s*[<"](?:[\w/]*/)?httplib\.h[>"]')
COMMENT = re.compile(r'//.*$')
LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"')


def check_file(path, rel):
    text = path.read_text(encoding='utf-8', errors='replace')
    if 'httplib' not in text:
        return []
    findings = []
    include_line = None
    serves = False
    for n, raw in enumerate(text.splitlines(), 1):
        if INCLUDE.search(raw) and include_line is None:
            include_line = n
        line = COMMENT.sub('', LITERAL.sub('""', raw))
        if SERVER.search(line):
            serves = True
        m = CLIENT.search(line)
        if m:
            findings.append(f'{rel}:{n}: names httplib::{m.group(1)}, a cpp-httplib client type')
    if include_line is not None and not serves:
        findings.append(f'{rel}:{include_line}: includes <httplib.h> without serving (no httplib::Server)')
    return findings


def source_files(root):
    """The C++ files under ROOT's checked folders, in a stable order."""
    for folder in DIRS:
        base = root / folder
        if base.is_dir():
            yield from (p for p in sorted(base.rglob('*')) if p.is_file() and p.suffix in SUFFIXES)


def main():
    parser = argparse.ArgumentParser(description='cpp-httplib clients only in ' + SEAM)
    parser.add_argument('root', type=pathlib.Path, help='the repository root')
    root = parser.parse_args().root
    if not (root / SEAM).is_file():
        print(f'check_http_client: {SEAM} is missing under {root}', file=sys.stderr)
        return 2
    checked = 0
    findings = []
    for path in source_files(root):
        checked += 1
        rel = path.relative_to(root).as_posix()
        if rel != SEAM:
            findings.extend(check_file(path, rel))
    for finding in findings:
        print(finding + ' — send through util::HttpClient (util/http_client.h)')
    if findings:
        print(f'check_http_client: {len(findings)} HTTP client use(s) outside {SEAM}', file=sys.stderr)
        return 1
    print(f'check_http_client: {checked} files, cpp-httplib clients only in {SEAM}')
    return 0


if __name__ == '__main__':
    sys.exit(main())

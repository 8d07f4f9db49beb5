#!/usr/bin/env python3
"""No JSON library exception reaches a gpumeter thread: outside JSON is read only through util/json_in.h.

nlohmann's value(key, default), at(), get<T>() / get_to() / get_ref<T>() throw on a missing key or a value of
another type, operator[] on a const value asserts, and json::parse(text) without `nullptr, false` throws on
bad text. This check fails on any of them in a file of src/ (and the fake NVML) that uses nlohmann, outside
util/json_in.* and the allowlist below (only JSON that is gpumeter's own output, each entry explained).

Usage: check_json_access.py ROOT   (the repository root: src/ and tests/fake_nvml/ are checked)
Exit 0 clean, 1 with one line per finding "FILE:LINE: what — use util/json_in.h".
"""
import pathlib
import re
import sys

# The accessors themselves.
ACCESSORS = {'src/util/json_in.h', 'src/util/json_in.cpp'}

# JSON gpumeter wrote itself, read back where an exception cannot escape. Each entry: why it is safe.
ALLOWLIST = {
    'src/agent/state.cpp':
        "the agent's own --state file (written by save_state), read in one try/catch of json::exception: a "
        "damaged file stops the start with a message naming it",
    'src/store/detail.h':
        "parse_json_or reads the ledger's own columns (written by json_of) and catches json::exception, "
        "giving the fallback",
}

# value( with an argument: nlohmann's value(key, default). Result/optional value() takes none.
VALUE = re.compile(r'(\.|->)value\(\s*[^)\s]')
# at("key") or at(1): the forms that read a document (a variable index is a container's or a row cursor's).
AT = re.compile(r'(\.|->)at\(\s*("|\d)')
GET = re.compile(r'(?<!std::)(?<![\w:])(\.|->)?\b(get|get_ref)<|\bget_to\(')
PARSE = re.compile(r'json::parse\(')
# A member read with operator[]: j["key"] not followed by an assignment or another [ (writes build output).
SUBSCRIPT = re.compile(
    r'(?<=[\w)\]])\[\s*"[^"]*"\s*\](?!\s*(\[|=(?!=)|\+=|\.push_back|\.emplace_back|\.update|\.merge_patch|\.back\(\)\s*\[))')
LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"')


def blank_literals(line):
    """String literals emptied, except a key in brackets (j["key"]), which the subscript check reads."""
    def keep_keys(m):
        before = line[:m.start()].rstrip()
        after = line[m.end():].lstrip()
        return m.group(0) if before.endswith('[') and after.startswith(']') else '""'
    return LITERAL.sub(keep_keys, line)
COMMENT = re.compile(r'//.*$')


INCLUDE = re.compile(r'#include\s+"([^"]+)"')


def json_headers(root, files):
    """Headers (as included, "module/x.h") that bring nlohmann's types in, directly or through another."""
    text = {p: p.read_text(encoding='utf-8', errors='replace') for p in files}
    heads = {p.relative_to(root / 'src').as_posix(): t for p, t in text.items()
             if p.suffix == '.h' and (root / 'src') in p.parents}
    found = {h for h, t in heads.items() if 'nlohmann' in t}
    while True:
        more = {h for h, t in heads.items() if h not in found and set(INCLUDE.findall(t)) & found}
        if not more:
            return found
        found |= more


def check_file(path, rel, headers):
    text = path.read_text(encoding='utf-8', errors='replace')
    if 'nlohmann' not in text and not set(INCLUDE.findall(text)) & headers:
        return []
    findings = []
    lines = text.splitlines()
    for n, raw in enumerate(lines, 1):
        line = re.sub(r'R"\(.*?\)"', '""', raw)
        line = COMMENT.sub('', blank_literals(line))
        if VALUE.search(line):
            findings.append(f'{rel}:{n}: value(key, default) throws on a value of another type')
        if AT.search(line):
            findings.append(f'{rel}:{n}: at() throws on a missing key or index')
        if GET.search(line):
            findings.append(f'{rel}:{n}: get<T>() / get_to() / get_ref<T>() throw on a value of another type')
        if PARSE.search(line):
            # The non-throwing form passes `nullptr, false`, possibly on the next line.
            window = line + ' ' + (lines[n] if n < len(lines) else '')
            if not re.search(r'nullptr\s*,\s*false', window):
                findings.append(f'{rel}:{n}: json::parse without (…, nullptr, false) throws on bad text')
        if SUBSCRIPT.search(line) and not line.lstrip().startswith(('#', '"')):
            findings.append(f'{rel}:{n}: operator[] read of a member asserts when it is missing')
    return findings


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1])
    files = [p for d in ('src', 'tests/fake_nvml') for p in sorted((root / d).rglob('*'))
             if p.suffix in ('.cpp', '.h') and p.is_file()]
    if not files:
        print(f'check_json_access: no sources under {root}/src', file=sys.stderr)
        return 2
    findings = []
    headers = json_headers(root, files)
    for p in files:
        rel = p.relative_to(root).as_posix()
        if rel in ACCESSORS or rel in ALLOWLIST:
            continue
        findings += check_file(p, rel, headers)
    for rel in sorted(ALLOWLIST):
        if not (root / rel).exists():
            findings.append(f'{rel}: in the allowlist but gone: remove the entry')
    if findings:
        for f in findings:
            print(f + ' — read outside JSON through util/json_in.h')
        print(f'check_json_access: {len(findings)} direct JSON access(es) that can throw', file=sys.stderr)
        return 1
    print(f'check_json_access: {len(files)} files, no throwing JSON access outside util/json_in.h '
          f'({len(ALLOWLIST)} allowlisted files of gpumeter\'s own JSON)')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

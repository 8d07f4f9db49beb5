#!/usr/bin/env python3
"""Money has one owner: no dollar arithmetic outside src/meter (docs/architecture.md, "meter").

A money operand is an identifier one of whose words (split at '_', lower case) is `micros`, `usd`, `spent` or
`price` (`cost_micros`, `budget_usd`, `nano_usd_per_month`, `price_micros_per_gpu_hour`, `micros_to_usd(...)`,
`spent(...)`), and none of whose words names a pure number or text (`price_ratio`, `price_source`,
`cost_share`), or a constant spelled with Micros/Usd (`kMicrosPerUsd`); a formatter's result (`format_*`,
`usd_decimal`) is text. A member (`r.cost_micros`, `p->spent_micros`), a
subscript of one (`team_micros[i]`), a call of one (`t.waste_micros()`), a cast of one
(`static_cast<double>(*cost_nano_usd)`) or a parenthesised group holding one counts as that identifier.

Arithmetic is any of these with a money operand on either side:
  - the binary operators `+ - * / %` (a `*` after a type name, `MicroUsd* p`, is a declaration, not a product);
  - unary minus, `++` and `--`;
  - the compound assignments `-= *= /= %=`, and `+=` whose right side computes (a binary arithmetic
    operator in it, outside a call's arguments).
Allowed (not arithmetic): comparing, copying, passing to a function (meter's rules, the formatters of
util/money.h), and a running total `total += term` of one term: summing exact integers decides nothing.
String literals and comments are ignored (SQL's SUM(cost_micros) is the ledger's query, not C++).

Exempt: src/meter/** (the owner) and src/util/money.{h,cpp} (the money type, its exact conversions, parser
and formatters, which meter and the layer-1 ledger both use). A line below meter's layer that cannot ask meter
may say why on the line itself: `// check_money: allow (REASON)`; each such line is listed when the check
passes, and one without a reason is a finding.

Usage: check_money.py ROOT   (the repository root: src/ is checked)
Exit 0 clean, 1 with one line per finding "FILE:LINE: OP on NAME — ask meter".
"""
import pathlib
import re
import sys

MONEY_WORDS = {'micros', 'usd', 'spent', 'price'}
NUMBER_WORDS = {'ratio', 'source', 'share', 'pct', 'fraction', 'text', 'name', 'origin', 'date'}
ALLOW = re.compile(r'//\s*check_money:\s*allow\b\s*(\(([^)]*)\))?')
OWNER = 'src/meter/'
EXEMPT = {'src/util/money.h', 'src/util/money.cpp'}

TOKEN = re.compile(r'''
    (?P<num>\d[\w.']*(?:[eE][+-]\d+)?)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<op>->\*?|\+\+|--|<<=|>>=|<=>|[-+*/%&|^<>=!]=|&&|\|\||::|<<|>>|\.\.\.|[-+*/%&|^<>=!~?:;,.(){}\[\]#])
''', re.VERBOSE)
LITERAL = re.compile(r'R"(\w*)\((?:.|\n)*?\)\1"|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')
COMMENT = re.compile(r'//[^\n]*|/\*(?:.|\n)*?\*/')
BUILTIN_TYPES = {'int', 'long', 'short', 'char', 'double', 'float', 'bool', 'void', 'auto', 'unsigned',
                 'signed', 'const', 'size_t', 'int64_t', 'uint64_t', 'int32_t', 'uint32_t', 'ptrdiff_t'}
KEYWORDS = {'return', 'case', 'throw', 'co_return', 'co_yield', 'sizeof', 'else', 'do', 'new', 'delete'}


def is_money(name):
    if name.startswith('format_') or name == 'usd_decimal':
        return False  # the formatters of util/money.h return text
    if name[0] == 'k' and len(name) > 1 and name[1].isupper():
        return 'Micros' in name or 'Usd' in name
    if name[0].isupper():
        return False  # a type (MicroUsd) is not an amount
    words = set(name.lower().split('_'))
    return bool(MONEY_WORDS & words) and not NUMBER_WORDS & words


def blank(text):
    """Comments and literals replaced by spaces, keeping the line breaks (and so the line numbers)."""
    def spaces(m):
        return ''.join('\n' if c == '\n' else ' ' for c in m.group(0))
    text = COMMENT.sub(spaces, text)
    text = LITERAL.sub(lambda m: '0' + spaces(m)[1:], text)
    return '\n'.join('' if ln.lstrip().startswith('#') else ln for ln in text.split('\n'))


def tokens(text):
    out, line = [], 1
    pos = 0
    for m in TOKEN.finditer(text):
        line += text.count('\n', pos, m.start())
        pos = m.start()
        kind = m.lastgroup
        out.append((kind, m.group(0), line))
    return out


def match(toks, i):
    """Index of the token that closes (or opens) the group opened (or closed) at toks[i]."""
    pairs = {'(': ')', '[': ']', ')': '(', ']': '['}
    this, other = toks[i][1], pairs[toks[i][1]]
    step = 1 if this in '([' else -1
    depth, j = 0, i
    while 0 <= j < len(toks):
        if toks[j][1] == this:
            depth += 1
        elif toks[j][1] == other:
            depth -= 1
            if depth == 0:
                return j
        j += step
    return j - step


def top_level(toks, a, b):
    """(index, token) of toks[a..b] outside any bracket."""
    depth = 0
    for k in range(a, b + 1):
        t = toks[k][1]
        if t in '([{':
            depth += 1
        elif t in ')]}':
            depth -= 1
        elif depth == 0:
            yield k, toks[k]


def group_money(toks, a, b):
    """The money identifier at the top level of toks[a..b] (a parenthesised group or a cast's operand). A
    conditional's value is its branches (after the top-level '?'); a comparison or a logical operator at the
    top level makes the group a truth value, not an amount."""
    for k, (_, t, _) in top_level(toks, a, b):
        if t == '?':
            a = k + 1
            break
        if t in ('==', '!=', '<=', '>=', '&&', '||', '!'):
            return None
    for _, (kind, t, _) in top_level(toks, a, b):
        if kind == 'id' and is_money(t):
            return t
    return None


def left_operand(toks, i):
    """The money name of the operand ending just before toks[i], else None; also whether it is an operand."""
    j = i - 1
    if j < 0:
        return None, False
    kind, t, _ = toks[j]
    if kind == 'num':
        return None, True
    if kind == 'id':
        if t in KEYWORDS:
            return None, False
        return (t if is_money(t) else None), True
    if t in (')', ']'):
        o = match(toks, j)
        if o <= 0:
            return group_money(toks, max(o, 0) + 1, j - 1), True
        before = toks[o - 1]
        if before[0] == 'id' and before[1] not in KEYWORDS and before[1] not in ('if', 'while', 'for', 'switch'):
            if is_money(before[1]):
                return before[1], True   # a call or a subscript of money
            if t == ']':
                return None, True
            return None, True            # a call of something else
        if before[1] == '>':              # static_cast<T>(x)
            return group_money(toks, o + 1, j - 1), True
        if before[1] in ('if', 'while', 'for', 'switch'):
            return None, False
        return group_money(toks, o + 1, j - 1), True
    return None, False


def right_operand(toks, i):
    """The money name of the operand starting just after toks[i], else None."""
    j = i + 1
    while j < len(toks) and toks[j][1] in ('*', '&', '!', '-', '+', '~', '::'):
        j += 1
    if j >= len(toks):
        return None
    if toks[j][1] == '(':
        return group_money(toks, j + 1, match(toks, j) - 1)
    if toks[j][0] != 'id':
        return None
    if toks[j][1] in ('static_cast', 'std'):
        # std::llround(x), static_cast<T>(x): look at the parenthesised argument.
        k = j
        while k < len(toks) and toks[k][1] != '(' and toks[k][1] not in (';', ',', ')'):
            k += 1
        if k < len(toks) and toks[k][1] == '(':
            name = None
            if toks[k - 1][0] == 'id' and toks[k - 1][1] != 'static_cast' and is_money(toks[k - 1][1]):
                name = toks[k - 1][1]
            return name or (group_money(toks, k + 1, match(toks, k) - 1) if toks[j][1] == 'static_cast'
                            else None)
        return None
    # a.b->c: the last identifier of the member chain (or a call / subscript of it).
    last = toks[j][1]
    while j + 2 < len(toks) and toks[j + 1][1] in ('.', '->', '::') and toks[j + 2][0] == 'id':
        j += 2
        last = toks[j][1]
    return last if is_money(last) else None


def rhs_is_arithmetic(toks, i, findings_at):
    """True when the right side of toks[i] (to the end of its statement) computes: a finding in it, or a
    binary arithmetic operator outside the arguments of a call."""
    depth = 0
    for k in range(i + 1, len(toks)):
        t = toks[k][1]
        if t in '([{':
            depth += 1
        elif t in ')]}':
            depth -= 1
            if depth < 0:
                return False
        elif depth == 0 and t in (';', ','):
            return False
        elif depth == 0 and t in ('+', '-', '*', '/', '%') and left_operand(toks, k)[1]:
            return True
        if k in findings_at:
            return True
    return False


def allowed_lines(text, rel, findings, allowed):
    """Lines marked `// check_money: allow (REASON)`; a mark without a reason is a finding."""
    out = set()
    for n, line in enumerate(text.splitlines(), 1):
        m = ALLOW.search(line)
        if not m:
            continue
        if not (m.group(2) or '').strip():
            findings.append(f'{rel}:{n}: check_money: allow without a (reason)')
            continue
        out.add(n)
        allowed.append(f'{rel}:{n}: {m.group(2).strip()}')
    return out


def check_text(text, rel, allowed=None):
    marks = allowed_lines(text, rel, [], []) if allowed is None else allowed
    toks = tokens(blank(text))
    found = {}
    plus_assign = []
    for i, (kind, t, line) in enumerate(toks):
        if kind != 'op':
            continue
        name = None
        if t in ('+', '-', '*', '/', '%'):
            left, is_operand = left_operand(toks, i)
            if not is_operand:
                if t == '-':  # unary minus
                    name = right_operand(toks, i)
                    if name:
                        found[i] = f'{rel}:{line}: unary - on {name}'
                continue
            if t == '*' and i > 0 and toks[i - 1][0] == 'id' and (
                    toks[i - 1][1][0].isupper() or toks[i - 1][1] in BUILTIN_TYPES):
                continue  # MicroUsd* p: a pointer declaration
            if t == '*' and i + 2 < len(toks) and toks[i + 1][0] == 'id' and toks[i + 2][1] == '=':
                continue  # const nlohmann::json* price = ...: a pointer declaration
            name = left or right_operand(toks, i)
        elif t in ('-=', '*=', '/=', '%='):
            name, _ = left_operand(toks, i)
            name = name or right_operand(toks, i)
        elif t in ('++', '--'):
            name, _ = left_operand(toks, i)
            name = name or right_operand(toks, i)
        elif t == '+=':
            plus_assign.append(i)
            continue
        if name:
            found[i] = f'{rel}:{line}: {t} on {name}'
    for i in plus_assign:
        name, _ = left_operand(toks, i)
        name = name or right_operand(toks, i)
        if name and rhs_is_arithmetic(toks, i, found):
            found[i] = f'{rel}:{toks[i][2]}: += of an arithmetic expression on {name}'
    return [found[k] for k in sorted(found) if toks[k][2] not in marks]


def check_tree(root):
    """(files checked, findings, allowed lines) of the sources under root/src."""
    files = [p for p in sorted((root / 'src').rglob('*')) if p.suffix in ('.cpp', '.h') and p.is_file()]
    findings, allowed = [], []
    for p in files:
        rel = p.relative_to(root).as_posix()
        if rel.startswith(OWNER) or rel in EXEMPT:
            continue
        text = p.read_text(encoding='utf-8', errors='replace')
        findings += check_text(text, rel, allowed_lines(text, rel, findings, allowed))
    findings += [f'{rel}: exempt but gone: remove the entry' for rel in sorted(EXEMPT) if not (root / rel).exists()]
    return files, findings, allowed


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    files, findings, allowed = check_tree(pathlib.Path(argv[1]))
    if not files:
        print(f'check_money: no sources under {argv[1]}/src', file=sys.stderr)
        return 2
    verdict = (f'check_money: {len(findings)} dollar computation(s) outside src/meter' if findings else
               f'check_money: {len(files)} files, no dollar arithmetic outside src/meter '
               f'({len(allowed)} line(s) allowed below meter\'s layer, listed above)')
    lines = [f + ' — dollar arithmetic belongs to meter (src/meter/meter.h)' for f in findings] or \
        [f'  allowed: {a}' for a in allowed]
    print('\n'.join(lines + [verdict]), file=sys.stderr if findings else sys.stdout)
    return 1 if findings else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

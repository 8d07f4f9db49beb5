#!/usr/bin/env python3
"""Architecture checks over src/ (docs/architecture.md):

- every include of another module's header is an edge the table below allows, and the table itself only goes
  down the layers: a sideways or upward include fails, so does a module the table does not place, and an
  allowed edge no file uses any more (the table matches the tree);
- no include cycle between modules;
- no printing outside src/cli and src/main.cpp (library code returns errors; the CLI renders them);
- a header's name belongs to one module: no other module has a file of that name (the subcommands live in
  src/cli/cmd_<name>.cpp, so no cli file shares a module's header name);
- every file under src/<module>/ declares and defines in namespace gm::<module> (or one nested in it): a
  header may also forward-declare another module's types in that module's namespace and a C library's
  type or variable at global scope, and util/result.h and util/money.h re-export util's vocabulary
  (REEXPORTS: Result, Error, ..., MicroUsd) into gm with using-declarations; nothing else is declared
  in bare gm, outside gm or in a file-level anonymous namespace outside gm::<module>.

Usage: check_layers.py SRC_DIR   (exit 0 clean, 1 with every violation listed)
"""
import pathlib
import re
import sys

# The layers, bottom first. Data flows up: telemetry -> meter -> (serving) -> guard -> agent -> report -> cli.
LAYERS = [
    # Knows no domain.
    ['util'],
    # Inputs and persistence, each on util alone: the OS, GPUs, the catalog's data, cloud metadata services,
    # the kubelet, profiler traces, and the ledger. The ledger sits this low because it knows no meter: it
    # stores the integer micro-dollars meter computes, in record types of its own that meter fills.
    ['sys', 'gpu', 'catalog', 'cloud', 'kubelet', 'trace', 'store'],
    # Money: the one owner of dollar arithmetic.
    ['meter'],
    # Advice over traces and runs; the serving-engine intake that the agent and the run supervisor share; the
    # pure planners over the catalog and the price lists' fetchers (their dollar arithmetic is meter's).
    ['findings', 'serving', 'plan', 'prices'],
    # The run supervisor: progress, forecast, the budget policy and notification.
    ['guard'],
    # The node agent; its node guard applies guard's budget policy to a node's owners.
    ['agent'],
    # Reports and every renderer: over the ledger, the supervisor's outcome, traces and plans.
    ['report'],
    # The MCP server: a protocol front end over the library, as the CLI is one over flags.
    ['mcp'],
    # Flags and dispatch.
    ['cli'],
]

# Which modules each module may include. Every edge goes to a lower layer (checked below).
ALLOWED = {
    'util': set(),
    'sys': {'util'},
    'gpu': {'util'},
    'catalog': {'util'},
    'cloud': {'util'},
    'kubelet': {'util'},
    'trace': {'util'},
    'store': {'util'},
    'meter': {'util', 'catalog', 'gpu', 'store'},  # RunMeter fills the ledger's SampleRecord rows
    'plan': {'util', 'catalog', 'meter'},  # costs per hour, per token and the TCO are meter's
    'prices': {'util', 'catalog', 'meter'},  # the sanity rule's price changes are meter's
    'findings': {'util', 'catalog', 'meter', 'trace'},
    'serving': {'util', 'meter', 'sys'},  # the per-model split is meter's; listening sockets come from /proc
    'guard': {'util', 'catalog', 'cloud', 'gpu', 'meter', 'serving', 'store', 'sys'},  # gpu_match reads samples
    # store: BudgetPeriod, the calendar period of node and owner budgets as of team budgets
    'agent': {'util', 'cloud', 'findings', 'gpu', 'guard', 'kubelet', 'meter', 'serving', 'store', 'sys'},
    # agent: top's screen over the collector's snapshot; gpu, kubelet, serving: what gpus and doctor show
    'report': {'util', 'agent', 'catalog', 'cloud', 'findings', 'gpu', 'guard', 'kubelet', 'meter', 'plan', 'prices',
               'serving', 'store', 'sys', 'trace'},
    # agent: the runs' live views; guard: the control datagrams; report: the run's and plan's JSON
    'mcp': {'util', 'agent', 'catalog', 'guard', 'meter', 'plan', 'report', 'store', 'sys'},
    'cli': {'util', 'agent', 'catalog', 'cloud', 'findings', 'gpu', 'guard', 'kubelet', 'mcp', 'meter', 'plan',
            'prices', 'report', 'serving', 'store', 'sys', 'trace'},  # findings: `trace` prices its analyses once
}

# The headers that may re-export names of gm::util into bare gm, with using-declarations, and which: the
# vocabulary every module's signatures use (a Result, its Error, and money's unit). Everything else of util
# is named util::X.
REEXPORTS = {
    'util/result.h': {'Result', 'Error', 'ErrorKind', 'make_error', 'ok_result'},
    'util/money.h': {'MicroUsd'},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/')
PRINTING = re.compile(r'\b(std::)?(printf|fprintf|vfprintf|puts|fputs|perror)\s*\(|std::(cout|cerr|clog)\b|'
                      r'fmt::print\s*\(')
COMMENT = re.compile(r'//.*$')


def sources(src):
    """Every .h and .cpp under a module folder of src, with its module."""
    for path in sorted(src.rglob('*')):
        if path.suffix in ('.h', '.cpp') and path.parent != src:
            yield path, path.relative_to(src).parts[0]


def module_graph(src):
    """module -> {included module: first 'file:line' that includes it}."""
    edges = {}
    for path, module in sources(src):
        edges.setdefault(module, {})
        for number, line in enumerate(path.read_text(encoding='utf-8', errors='replace').splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1) != module and (src / m.group(1)).is_dir():
                edges[module].setdefault(m.group(1), f'{path.relative_to(src.parent)}:{number}')
    return edges


def layer_of():
    return {module: i for i, layer in enumerate(LAYERS) for module in layer}


def table_problems():
    """The table against the layers: each module placed once, every allowed edge downward."""
    out = []
    layer = layer_of()
    placed = [m for l in LAYERS for m in l]
    for m in sorted({m for m in placed if placed.count(m) > 1}):
        out.append(f'scripts/check_layers.py: module {m} is in more than one layer')
    for m in sorted(set(placed) ^ set(ALLOWED)):
        out.append(f'scripts/check_layers.py: module {m} must be in both LAYERS and ALLOWED')
    for m, deps in sorted(ALLOWED.items()):
        for d in sorted(deps):
            if m in layer and d in layer and layer[d] >= layer[m]:
                out.append(f'scripts/check_layers.py: ALLOWED lets {m} include {d}, which is not in a lower layer')
    return out


def edge_problems(edges):
    out = []
    layer = layer_of()
    for module in sorted(edges):
        if module not in ALLOWED:
            out.append(f'src/{module}: a module the table in scripts/check_layers.py does not place in a layer')
            continue
        for dep, where in sorted(edges[module].items()):
            if dep in ALLOWED[module]:
                continue
            if dep not in layer:
                kind = 'a module the table does not place'
            elif layer[dep] > layer[module]:
                kind = 'upward'
            elif layer[dep] == layer[module]:
                kind = 'sideways'
            else:
                kind = 'not an allowed edge'
            out.append(f'{where}: {module} includes {dep} ({kind}); {module} may include only: '
                       f'{", ".join(sorted(ALLOWED[module])) or "nothing of gpumeter"}')
        for dep in sorted(ALLOWED[module] - set(edges[module])):
            out.append(f'scripts/check_layers.py: ALLOWED lets {module} include {dep}, but no file of src/{module} '
                       f'does: remove the edge')
    return out


def cycles(edges):
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = 'open'
        stack.append(node)
        for nxt in sorted(edges.get(node, {})):
            if state.get(nxt) == 'open':
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 'done'

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def printing(src):
    out = []
    for path in sorted(src.rglob('*')):
        if path.suffix not in ('.h', '.cpp') or path.name == 'main.cpp' and path.parent == src:
            continue
        if path.relative_to(src).parts[0] == 'cli':
            continue
        for number, line in enumerate(path.read_text(encoding='utf-8', errors='replace').splitlines(), 1):
            if PRINTING.search(COMMENT.sub('', line)):
                out.append(f'{path.relative_to(src.parent)}:{number}: prints outside src/cli: {line.strip()}')
    return out


def header_names(src):
    """A header X.h of module M: no other module has a file named X (.h or .cpp)."""
    names = {}
    for path, module in sources(src):
        names.setdefault(path.stem, []).append((module, path))
    out = []
    for stem, files in sorted(names.items()):
        for module, path in files:
            if path.suffix != '.h':
                continue
            for other, other_path in files:
                if other == module:
                    continue
                out.append(f'{path.relative_to(src.parent)}: header name also used by '
                           f'{other_path.relative_to(src.parent)} (one name, one module)')
    return out


def code_only(text):
    """Text with comments, string and character literals blanked (newlines kept), so braces can be counted."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
        elif text[i] == '"' and text[i - 1:i] == 'R':
            open_paren = text.find('(', i)
            close = text.find(')' + text[i + 1:open_paren] + '"', open_paren)
            j = n if close < 0 else close + open_paren - i + 1
        elif text[i] in '"\'' and not (text[i] == "'" and text[i - 1:i].isalnum()):
            j = i + 1
            while j < n and text[j] != text[i] and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            j += 1
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(''.join(c if c == '\n' else ' ' for c in text[i:j]))
        i = j
    return ''.join(out)


FORWARD = re.compile(r'^(?:(?:struct|class)\s+\w+|enum\s+class\s+\w+\s*:\s*[\w:]+)$')
C_GLOBAL = re.compile(r'^(?:struct\s+\w+|extern\s+[\w\s*]*[\s*]\w+)$')  # struct sqlite3; extern char** environ
REEXPORT = re.compile(r'^using\s+util::(\w+)$')


def top_level_blocks(code):
    """(namespace or None, line, body) for each top-level namespace block and each top-level declaration."""
    depth, i, n, start = 0, 0, len(code), 0
    blocks = []
    ns_open = None
    while i < n:
        c = code[i]
        if c == '#' and (i == 0 or code[i - 1] == '\n'):
            j = code.find('\n', i)
            while 0 < j and code[j - 1] == '\\':  # a macro continued on the next line
                j = code.find('\n', j + 1)
            i = n if j < 0 else j
            start = i if depth == 0 else start
            continue
        if c == '{':
            if depth == 0:
                head = code[start:i]
                m = re.search(r'\bnamespace\s*([\w:]*)\s*$', head)
                ns_open = (m.group(1) if m else None, code.count('\n', 0, i) + 1, i + 1)
                if not m and head.strip():
                    blocks.append((None, code.count('\n', 0, i) + 1, head))
            depth += 1
        elif c == '}':
            depth -= 1
            if depth == 0 and ns_open:
                blocks.append((ns_open[0], ns_open[1], code[ns_open[2]:i]))
                ns_open = None
            if depth == 0:
                start = i + 1
        elif c == ';' and depth == 0:
            if code[start:i].strip():
                blocks.append((None, code.count('\n', 0, i) + 1, code[start:i]))
            start = i + 1
        i += 1
    return blocks


def namespaces(src):
    """Every file of module M declares and defines in gm::M (forward declarations of other modules aside)."""
    out = []
    for path, module in sources(src):
        rel = path.relative_to(src).as_posix()
        where = path.relative_to(src.parent)
        for name, line, body in top_level_blocks(code_only(path.read_text(encoding='utf-8', errors='replace'))):
            own = f'gm::{module}'
            if name == own or (name or '').startswith(own + '::'):
                continue
            statements = [' '.join(s.split()) for s in body.split(';') if s.strip()]
            if name is None and statements and all(C_GLOBAL.match(s) for s in statements):
                continue  # a C library's type or variable, declared where it lives (struct sqlite3, environ)
            if name is None:
                out.append(f'{where}:{line}: declares outside namespace {own}: one namespace per module')
            elif name.startswith('gm::') and statements and all(FORWARD.match(s) for s in statements):
                continue  # forward declarations of another module's types, in its namespace
            elif name == 'gm' and statements and all(
                    (m := REEXPORT.match(s)) and m.group(1) in REEXPORTS.get(rel, ()) for s in statements):
                continue  # util's vocabulary, re-exported
            else:
                out.append(f'{where}:{line}: declares in namespace {name or "(anonymous)"}, not {own}: '
                           'one namespace per module')
    return out


def check(src):
    edges = module_graph(src)
    problems = table_problems() + edge_problems(edges)
    for cycle in cycles(edges):
        hops = [f'{a} -> {b} ({edges[a][b]})' for a, b in zip(cycle, cycle[1:])]
        problems.append('include cycle: ' + '; '.join(hops))
    problems += printing(src)
    problems += header_names(src)
    problems += namespaces(src)
    return edges, problems


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src = pathlib.Path(sys.argv[1]).resolve()
    edges, problems = check(src)
    for p in problems:
        print(p)
    if not problems:
        print(f'{len(edges)} modules in {len(LAYERS)} layers, {sum(len(v) for v in edges.values())} module '
              'dependencies, each allowed and downward; no cycle; no printing outside src/cli; header names unique; '
              'each file in its module\'s namespace')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""Architecture checks over src/ (docs/architecture.md): no include cycle between modules, and no printing
outside src/cli and src/main.cpp (library code returns errors; the CLI renders them).

Usage: check_layers.py SRC_DIR   (exit 0 clean, 1 with every violation listed)
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/')
PRINTING = re.compile(r'\b(std::)?(printf|fprintf|vfprintf|puts|fputs|perror)\s*\(|std::(cout|cerr|clog)\b|'
                      r'fmt::print\s*\(')
COMMENT = re.compile(r'//.*$')


def module_graph(src):
    edges = {}
    for path in sorted(src.rglob('*')):
        if path.suffix not in ('.h', '.cpp') or path.parent == src:
            continue
        module = path.relative_to(src).parts[0]
        edges.setdefault(module, {})
        for number, line in enumerate(path.read_text(encoding='utf-8', errors='replace').splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1) != module and (src / m.group(1)).is_dir():
                edges[module].setdefault(m.group(1), f'{path.relative_to(src.parent)}:{number}')
    return edges


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


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src = pathlib.Path(sys.argv[1]).resolve()
    edges = module_graph(src)
    problems = []
    for cycle in cycles(edges):
        hops = [f'{a} -> {b} ({edges[a][b]})' for a, b in zip(cycle, cycle[1:])]
        problems.append('include cycle: ' + '; '.join(hops))
    problems += printing(src)
    for p in problems:
        print(p)
    if not problems:
        print(f'{len(edges)} modules, {sum(len(v) for v in edges.values())} module dependencies, no cycle; '
              'no printing outside src/cli')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

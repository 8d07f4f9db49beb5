#!/usr/bin/env python3
"""Writes gpumeter's man pages and shell completions from the commands' own --help.

Usage: scripts/package_docs.py GPUMETER_BINARY OUT_DIR

OUT_DIR/man/gpumeter.1.gz and gpumeter-COMMAND.1.gz (help2man over `gpumeter COMMAND --help`),
OUT_DIR/completions/gpumeter (bash) and OUT_DIR/completions/_gpumeter (zsh). A command or option added to
the CLI appears in both on the next build; nothing here lists them by hand.
"""
import gzip
import re
import subprocess
import sys
from pathlib import Path


def run(args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def commands(binary):
    """(name, summary) of every command, from `gpumeter --help`."""
    out, in_commands = [], False
    for line in run([binary, "--help"]).splitlines():
        if line.startswith("Commands:"):
            in_commands = True
        elif in_commands and line.startswith("  "):
            name, _, summary = line.strip().partition(" ")
            out.append((name, summary.strip()))
        elif in_commands and line.strip():
            break
    if not out:
        sys.exit(f"package_docs: no commands in '{binary} --help'")
    return out


OPTION = re.compile(r"^  (?:(-\w),)?(--[\w-]+)(?: (\S+))?")


def options(binary, command):
    """[(short or None, long, takes_value, choices)] of one command, from its --help."""
    out = []
    for line in run([binary, command, "--help"]).splitlines():
        m = OPTION.match(line)
        if not m:
            continue
        short, long_, kind = m.group(1), m.group(2), m.group(3)
        choices = []
        if kind:
            c = re.search(r"\{([^}]*)\}", kind)
            if c:
                choices = c.group(1).split(",")
        out.append((short, long_, bool(kind), choices))
    return out


def man_page(binary, version, name, summary, out_dir):
    help_option = "--help" if name is None else f"{name} --help"
    text = run(["help2man", "--no-info", "--no-discard-stderr", f"--version-string=gpumeter {version}",
                f"--help-option={help_option}", "-n", summary, binary])
    page = "gpumeter" if name is None else f"gpumeter-{name}"
    if name is not None:
        # CLI11 prints the command's own name as the program ("Usage: trace [OPTIONS]").
        text = text.replace('.TH GPUMETER "1"', f'.TH {page.upper().replace("-", chr(92) + "-")} "1"', 1)
        text = re.sub(r"^gpumeter \\- ", f"gpumeter\\\\-{name} \\\\- ", text, count=1, flags=re.M)
        text = re.sub(r"^\.B " + re.escape(name) + "$", f".B gpumeter {name}", text, flags=re.M)
    # Reproducible: no build date in the page (lintian, reproducible-builds).
    text = re.sub(r'^(\.TH [^"]*"1") "[^"]*"', r'\1 ""', text, count=1, flags=re.M)
    data = gzip.compress(text.encode(), compresslevel=9, mtime=0)
    (out_dir / f"{page}.1.gz").write_bytes(data)


def bash_completion(cmds, opts):
    lines = [
        "# bash completion for gpumeter (generated from its --help by scripts/package_docs.py)",
        "_gpumeter() {",
        "  local cur prev cmd",
        '  cur="${COMP_WORDS[COMP_CWORD]}"',
        '  prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "  if [ \"$COMP_CWORD\" -eq 1 ]; then",
        f'    COMPREPLY=($(compgen -W "{" ".join(c for c, _ in cmds)} --help --version" -- "$cur"))',
        "    return",
        "  fi",
        '  cmd="${COMP_WORDS[1]}"',
        '  case "$cmd" in',
    ]
    for c, _ in cmds:
        with_value = [o[1] for o in opts[c] if o[2]]
        words = []
        for short, long_, _, _ in opts[c]:
            words += [w for w in (short, long_) if w]
        lines.append(f"    {c})")
        for short, long_, takes, choices in opts[c]:
            if choices:
                lines.append(f'      if [ "$prev" = "{long_}" ]; then COMPREPLY=($(compgen -W "{" ".join(choices)}" -- "$cur")); return; fi')
        if with_value:
            pattern = "|".join(with_value)
            lines.append(f'      case "$prev" in {pattern}) COMPREPLY=($(compgen -f -- "$cur")); return ;; esac')
        if c == "run":
            # After the job's first word everything belongs to the job: complete commands and files.
            lines.append('      if [[ "$cur" != -* ]]; then COMPREPLY=($(compgen -c -f -- "$cur")); return; fi')
        lines.append(f'      COMPREPLY=($(compgen -W "{" ".join(words)}" -- "$cur"))')
        lines.append('      [[ "$cur" == -* ]] || COMPREPLY+=($(compgen -f -- "$cur"))')
        lines.append("      ;;")
    lines += ["  esac", "}", "complete -o filenames -F _gpumeter gpumeter", ""]
    return "\n".join(lines)


def zsh_quote(s):
    return s.replace("'", "'\\''").replace("[", "\\[").replace("]", "\\]").replace(":", "\\:")


def zsh_completion(cmds, opts, helps):
    lines = ["#compdef gpumeter", "# zsh completion for gpumeter (generated from its --help by scripts/package_docs.py)",
             "", "_gpumeter() {", "  local -a commands", "  commands=("]
    for c, summary in cmds:
        lines.append(f"    '{c}:{zsh_quote(summary)}'")
    lines += ["  )", "  if (( CURRENT == 2 )); then", "    _describe -t commands 'gpumeter command' commands",
              "    return", "  fi", "  case ${words[2]} in"]
    for c, _ in cmds:
        lines.append(f"    {c})")
        lines.append("      shift words; (( CURRENT-- ))")
        specs = []
        for short, long_, takes, choices in opts[c]:
            desc = zsh_quote(helps[c].get(long_, ""))
            action = ""
            if takes:
                action = f":value:({' '.join(choices)})" if choices else ":value:_files"
            name = f"{{{short},{long_}}}" if short else long_
            specs.append(f"'{name}[{desc}]{action}'" if not short else f"{name}'[{desc}]{action}'")
        rest = "'*::job:_normal'" if c == "run" else "'*:file:_files'"
        lines.append("      _arguments -s " + " ".join(specs + [rest]))
        lines.append("      ;;")
    lines += ["  esac", "}", "", '_gpumeter "$@"', ""]
    return "\n".join(lines)


def option_help(binary, command):
    helps = {}
    for line in run([binary, command, "--help"]).splitlines():
        m = OPTION.match(line)
        if m:
            helps[m.group(2)] = line[m.end():].strip()
    return helps


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, out = sys.argv[1], Path(sys.argv[2])
    version = run([binary, "--version"]).split()[-1]
    cmds = commands(binary)
    man_dir, comp_dir = out / "man", out / "completions"
    man_dir.mkdir(parents=True, exist_ok=True)
    comp_dir.mkdir(parents=True, exist_ok=True)
    man_page(binary, version, None, "what GPU work costs, per second", man_dir)
    opts, helps = {}, {}
    for c, summary in cmds:
        man_page(binary, version, c, summary, man_dir)
        opts[c] = options(binary, c)
        helps[c] = option_help(binary, c)
    (comp_dir / "gpumeter").write_text(bash_completion(cmds, opts))
    (comp_dir / "_gpumeter").write_text(zsh_completion(cmds, opts, helps))


if __name__ == "__main__":
    main()

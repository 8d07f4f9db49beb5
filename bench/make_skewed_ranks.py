#!/usr/bin/env python3
"""Make a folder of per-rank Kineto traces of one job with straggler ranks, for `gpumeter trace FOLDER`.

One rank trace is made from a real source trace: with --copies 1 it is the source itself, rewritten one event
per block; larger ones are synthesized by ../shared/tools/synth_kineto.py (--copies N or --target-mb, as
there; --synth names another path). Every rank is then a copy of it with:

  * distributedInfo.rank = r and world_size = --ranks;
  * on every NCCL kernel that carries collective metadata ("Collective name"): "Group size" = --ranks,
    "Process Group Ranks" = "[0, ..., N-1]" and, unless --no-seq, "Seq" = its index among the kernels of
    its process group in file order (the same on every rank, as PyTorch numbers them);
  * the skew: the kernels of the ranks that are NOT slow start --skew-us earlier and run --skew-us longer
    (they wait for the slow ranks, which keep the source timing), on every --every-th collective.

So each skewed collective instance makes every early rank wait exactly --skew-us, and the job's straggler
wait is instances × (ranks − slow ranks) × skew. The expected figures are printed as JSON at the end.

Timestamps are edited as decimal text (Python Decimal), never through a double, so the nanoseconds stay
exact at epoch scale. Events are streamed: memory stays small whatever the trace size.

Usage:
  make_skewed_ranks.py --source SRC.json[.gz] --copies 1 --ranks 4 --slow-rank 3 --skew-us 250 --out DIR
  make_skewed_ranks.py --source SRC --target-mb 1000 --ranks 8 --slow-rank 5 --skew-us 100 --every 3 --out DIR
"""
import argparse
import decimal
import gzip
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SYNTH = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "tools", "synth_kineto.py"))


class Num(str):
    """A JSON number kept as the text it was written as."""


def shift(token, delta_us):
    """A JSON number token plus delta_us (an integer), as text with the token's decimals."""
    value = decimal.Decimal(token) + delta_us
    if "." in token:
        places = len(token.split(".", 1)[1])
        return Num(value.quantize(decimal.Decimal(1).scaleb(-places)))
    return Num(value)


def events(lines):
    """Yields ("raw", line) for lines outside events and ("event", [lines]) for each event block.

    The base trace has every event as a block that starts with a line "  {" and ends with a line "  }"
    (followed by "," between events): synth_kineto.py's layout, and write_source's."""
    block = None
    for line in lines:
        if block is None:
            if line.rstrip("\n") == "  {":
                block = [line]
            else:
                yield "raw", line
        else:
            block.append(line)
            stripped = line.rstrip("\n")
            if stripped in ("  }", "  },"):
                yield "event", block
                block = None
    if block is not None:
        raise SystemExit("unterminated event block in the synthesized trace")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True, help="a real Kineto trace whose NCCL kernels carry metadata")
    ap.add_argument("--out", required=True, help="the folder to write rank-R.json into")
    size = ap.add_mutually_exclusive_group(required=True)
    size.add_argument("--copies", type=int, help="synth_kineto.py --copies (1: the source itself)")
    size.add_argument("--target-mb", type=float, help="synth_kineto.py --target-mb, per rank")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--slow-rank", type=int, action="append", default=None,
                    help="a straggler rank (repeatable; default: the last rank)")
    ap.add_argument("--skew-us", type=int, default=100, help="how long the early ranks wait, in whole µs")
    ap.add_argument("--every", type=int, default=1, help="skew every N-th collective of a process group")
    ap.add_argument("--no-seq", action="store_true", help="write no \"Seq\" (ranks matched by order)")
    ap.add_argument("--synth", default=DEFAULT_SYNTH, help="path of synth_kineto.py")
    args = ap.parse_args()
    slow = set(args.slow_rank if args.slow_rank else [args.ranks - 1])
    if args.ranks < 2 or args.skew_us < 0 or args.every < 1 or not slow <= set(range(args.ranks)):
        raise SystemExit("need --ranks >= 2, --skew-us >= 0, --every >= 1 and slow ranks in [0, ranks)")

    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, ".base.json")
    cmd = [sys.executable, args.synth, "--source", args.source, "--out", base, "--rank", "0"]
    cmd += ["--copies", str(args.copies)] if args.copies else ["--target-mb", str(args.target_mb)]
    if args.copies == 1:
        write_source(args.source, base)
    else:
        if not os.path.exists(args.synth):
            raise SystemExit("%s not found: --copies above 1 and --target-mb need synth_kineto.py (--synth)"
                             % args.synth)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)

    ranks_text = "[" + ", ".join(str(r) for r in range(args.ranks)) + "]"
    instances = 0
    skewed = 0
    try:
        for rank in range(args.ranks):
            seq = {}
            count = 0
            skew_count = 0
            path = os.path.join(args.out, "rank-%d.json" % rank)
            with open(base) as src, open(path + ".tmp", "w") as out:
                for kind, item in events(src):
                    if kind == "raw":
                        if item.startswith('  "distributedInfo": '):
                            info = json.loads(item[len('  "distributedInfo": '):].rstrip().rstrip(","))
                            info["rank"] = rank
                            info["world_size"] = args.ranks
                            item = '  "distributedInfo": %s,\n' % json.dumps(info)
                        out.write(item)
                        continue
                    text = "".join(item)
                    if '"Collective name"' not in text or '"cat": "kernel"' not in text:
                        out.write(text)
                        continue
                    comma = text.rstrip().endswith(",")
                    ev = json.loads(text.rstrip().rstrip(","), parse_float=Num, parse_int=Num)
                    a = ev["args"]
                    group = a.get("Process Group Name", "")
                    index = seq.get(group, 0)
                    seq[group] = index + 1
                    count += 1
                    a["Group size"] = Num(args.ranks)
                    a["Process Group Ranks"] = ranks_text
                    if not args.no_seq:
                        a["Seq"] = Num(index)
                    if index % args.every == 0:
                        skew_count += 1
                        if rank not in slow:
                            ev["ts"] = shift(ev["ts"], -args.skew_us)
                            ev["dur"] = shift(ev["dur"], args.skew_us)
                    out.write(render(ev) + (",\n" if comma else "\n"))
            os.replace(path + ".tmp", path)
            instances, skewed = count, skew_count
    finally:
        os.remove(base)
    early = args.ranks - len(slow)
    wait_ns = skewed * early * args.skew_us * 1000
    print(json.dumps({"out": args.out, "ranks": args.ranks, "slow_ranks": sorted(slow),
                      "collectives_per_rank": instances, "skewed_collectives": skewed,
                      "skew_ns": args.skew_us * 1000, "expected_straggler_wait_ns": wait_ns,
                      "expected_wait_suffered_ns_per_early_rank": skewed * args.skew_us * 1000}))


def write_source(source, path):
    """The source trace itself in the block layout events() reads, its numbers as written, rank 0."""
    opener = gzip.open if source.endswith(".gz") else open
    with opener(source, "rt") as fh:
        doc = json.load(fh, parse_float=Num, parse_int=Num)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise SystemExit("%s: not a Kineto trace (no traceEvents list)" % source)
    info = dict(doc.get("distributedInfo") or {})
    info["rank"] = Num(0)
    doc["distributedInfo"] = info
    with open(path, "w") as out:
        out.write("{\n")
        for key, value in doc.items():
            if key != "traceEvents":
                out.write("  %s: %s,\n" % (json.dumps(key), value_text(value)))
        out.write('  "traceEvents": [\n')
        out.write(",\n".join(render(ev) for ev in doc["traceEvents"] if isinstance(ev, dict)))
        out.write("\n  ]\n}\n")


def value_text(v):
    """A JSON value as text, Num tokens unquoted."""
    if isinstance(v, Num):
        return str(v)
    if isinstance(v, dict):
        return "{" + ", ".join("%s: %s" % (json.dumps(k), value_text(x)) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(value_text(x) for x in v) + "]"
    return json.dumps(v)


def render(ev):
    """One event in synth_kineto.py's layout; numbers kept as the text they were parsed from."""
    val = value_text
    head = [k for k in ev if k not in ("ts", "dur", "args")]
    parts = ["  {\n    " + ", ".join('"%s": %s' % (k, val(ev[k])) for k in head)]
    timing = ['"%s": %s' % (k, ev[k]) for k in ("ts", "dur") if k in ev]
    if timing:
        parts.append(",\n    " + ", ".join(timing))
    if "args" in ev:
        inner = ",\n      ".join("%s: %s" % (json.dumps(k), val(v)) for k, v in ev["args"].items())
        parts.append(',\n    "args": {\n      ' + inner + "\n    }")
    parts.append("\n  }")
    return "".join(parts)



if __name__ == "__main__":
    main()

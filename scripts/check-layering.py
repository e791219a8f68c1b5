#!/usr/bin/env python3
"""The layering rules of ARCHITECTURE.md, checked (scripts/test.sh runs this).

1. No hand-written Rust source file over 1,400 lines (generated code and the IDL
   compiler's golden corpus are not hand-written).
2. No circular imports inside a crate: among the modules that share a parent, the
   "uses" relation (a `crate::`, `super::` or `self::` path from one file to another
   module) has no cycle. A child using its parent's items, or a parent its children's,
   is not a cycle: that is how a folder module is built.
3. The engine's dependency tree holds no command-line or JSON crate: `clap` and
   `serde_json` are for the benchmark and example binaries, not for `spindle-group`.

Prints every violation with the file (and the cycle) and exits 1 if there is one.
Usage: python3 scripts/check-layering.py [--no-cargo]   (--no-cargo skips rule 3)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINES_MAX = 1400
ENGINE = "spindle-group"
NOT_IN_ENGINE = ("clap", "serde_json")
SKIP_PARTS = ("target", "corpus", "generated", ".git", "fuzz")


def rust_files():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_PARTS and not d.startswith(".")]
        for f in filenames:
            if f.endswith(".rs"):
                yield os.path.join(dirpath, f)


def check_sizes():
    bad = []
    for path in rust_files():
        with open(path, encoding="utf-8", errors="replace") as fh:
            n = sum(1 for _ in fh)
        if n > LINES_MAX:
            bad.append(f"{os.path.relpath(path, ROOT)}: {n} lines, at most {LINES_MAX} (split it by responsibility)")
    return bad


def crate_src_dirs():
    for entry in sorted(os.listdir(ROOT)):
        src = os.path.join(ROOT, entry, "src")
        if os.path.isfile(os.path.join(ROOT, entry, "Cargo.toml")) and os.path.isdir(src):
            yield entry, src


def module_of(src, path):
    """The module path of a source file: lib.rs/main.rs -> (), a/mod.rs -> (a,), a/b.rs -> (a, b)."""
    rel = os.path.relpath(path, src)
    parts = rel[:-3].split(os.sep)
    if parts[0] == "bin":
        return None  # binaries are crates of their own
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


COMMENT = re.compile(r"//[^\n]*")
USE_BLOCK = re.compile(r"\buse\s+(crate|super|self)::((?:[^;{}]|\{[^;]*?\})*);", re.S)
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def expand_use(tree):
    """Paths named by the tree of a `use` after its root: `a::{b, c::d}` -> [a::b, a::c::d]."""
    tree = tree.strip()
    m = re.match(r"^([A-Za-z0-9_:]*?)(?:::)?\{(.*)\}$", tree, re.S)
    if not m:
        return [tree.split(" as ")[0].strip()]
    prefix, inner = m.group(1), m.group(2)
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    items.append(cur)
    out = []
    for it in items:
        if not it.strip():
            continue
        for sub in expand_use(it):
            out.append(f"{prefix}::{sub}" if prefix else sub)
    return out


def references(text):
    text = COMMENT.sub("", text)
    refs = []
    for m in USE_BLOCK.finditer(text):
        for p in expand_use(m.group(2)):
            refs.append((m.group(1), [s for s in p.split("::") if s]))
    for m in PATH.finditer(USE_BLOCK.sub("", text)):
        refs.append((m.group(1), [s for s in m.group(2).split("::") if s]))
    return refs


def resolve(modules, here, root, segs):
    if root == "crate":
        base = ()
    elif root == "self":
        base = here
    else:
        base = here[:-1]
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
    target = base
    for s in segs:
        if target + (s,) in modules:
            target = target + (s,)
        else:
            break
    return target


def check_cycles():
    bad = []
    for crate, src in crate_src_dirs():
        files = {}
        for dirpath, _, filenames in os.walk(src):
            for f in filenames:
                if f.endswith(".rs"):
                    p = os.path.join(dirpath, f)
                    m = module_of(src, p)
                    if m is not None:
                        files[m] = p
        modules = set(files)
        edges = {}
        for here, path in files.items():
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for root, segs in references(text):
                there = resolve(modules, here, root, segs)
                k = 0
                while k < min(len(here), len(there)) and here[k] == there[k]:
                    k += 1
                if k == len(here) or k == len(there):
                    continue  # parent and child, or the same module
                parent = here[:k]
                a, b = here[k], there[k]
                edges.setdefault(parent, {}).setdefault(a, set()).add(b)
        for parent, g in edges.items():
            for cycle in find_cycles(g):
                where = "::".join(parent) or "crate root"
                bad.append(f"{crate}: modules under {where} import each other: {' -> '.join(cycle)}")
    return bad


def find_cycles(g):
    seen, out, reported = set(), [], set()
    def dfs(n, stack):
        for m in sorted(g.get(n, ())):
            if m in stack:
                cyc = stack[stack.index(m):] + [m]
                key = frozenset(cyc)
                if key not in reported:
                    reported.add(key)
                    out.append(cyc)
            elif m not in seen:
                dfs(m, stack + [m])
        seen.add(n)
    for n in sorted(g):
        if n not in seen:
            dfs(n, [n])
    return out


def check_engine_deps():
    try:
        tree = subprocess.run(
            ["cargo", "tree", "-p", ENGINE, "-e", "normal", "--prefix", "none", "--locked"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        return [f"cargo tree -p {ENGINE} failed: {e}"]
    names = {line.split()[0] for line in tree.splitlines() if line.strip()}
    return [f"{ENGINE} depends on {d} (move the code that needs it out of the engine)" for d in NOT_IN_ENGINE if d in names]


def main():
    bad = check_sizes() + check_cycles()
    if "--no-cargo" not in sys.argv:
        bad += check_engine_deps()
    for b in bad:
        print(f"check-layering: {b}")
    if bad:
        sys.exit(1)
    print("check-layering: ok (file sizes, module cycles, engine dependencies)")


if __name__ == "__main__":
    main()

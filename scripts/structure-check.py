#!/usr/bin/env python3
"""The shape of the code, checked: import circles and long functions.

    scripts/structure-check.py            # both checks; exit 1 on a finding
    scripts/structure-check.py imports    # the file-level import graph
    scripts/structure-check.py functions  # functions over the limit
    scripts/structure-check.py --report   # print the graph and the longest functions too

Imports: inside each checked module tree (a crate's `src/`, or one module
folder), every `crate::`, `super::` and `self::` path in non-test code is
resolved to the file that defines it. Two findings fail the check:
- a circle: files that import each other, directly or through others;
- an arrow back up: a file importing its own parent module (`mod.rs`), which
  makes every child depend on the list of its siblings.

Functions: no function outside tests is longer than the limit (80 lines,
signature to closing brace). Test code is a `tests/` or `benches/` folder, a
`#[cfg(test)]` module, or a file only compiled for tests.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Module trees whose files may not import each other in a circle.
IMPORT_TREES = [
    ("crates/bench/src", "crates/bench/src", ""),
    ("crates/core/src", "crates/core/src/protocol", "protocol"),
]
FN_LIMIT = 80
# Folders whose functions are counted.
FN_ROOTS = ["src", "crates"]


def rel(path):
    return os.path.relpath(path, ROOT)


def strip_comments(text):
    """Blanks out comments and string contents, keeping line breaks."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"' or (c == "r" and re.match(r'r#*"', text[i:i + 10]) and not text[i - 1:i].isalnum()):
            m = re.match(r'r(#*)"', text[i:i + 10])
            if c == "r" and m:
                end = '"' + m.group(1)
                j = text.find(end, i + len(m.group(0)))
                j = n if j < 0 else j + len(end)
            else:
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                j += 1
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + '"')
            i = j
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            j = i + len(m.group(0)) if m else i + 1
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text, open_at):
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def test_spans(code):
    """Character spans of `#[cfg(test)]` items (modules, functions, impls)."""
    spans = []
    for m in re.finditer(r"#\[cfg\((?:test|all\(test[^\]]*)\)\]", code):
        k = code.find("{", m.end())
        semi = code.find(";", m.end())
        if k < 0 or (0 <= semi < k):
            continue
        spans.append((m.start(), matching_brace(code, k)))
    return spans


def in_spans(pos, spans):
    return any(a <= pos <= b for a, b in spans)


def rust_files(top):
    for dirpath, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("target", "tests", "benches", "fuzz", "docs", "proto")]
        for f in files:
            if f.endswith(".rs"):
                yield os.path.join(dirpath, f)


def test_only_files(src):
    """Files declared only under `#[cfg(test)] mod x;` by their parent."""
    found = set()
    for path in rust_files(src):
        code = strip_comments(open(path).read())
        base = os.path.dirname(path) if os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs") \
            else os.path.splitext(path)[0]
        for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code):
            for cand in (os.path.join(base, m.group(1) + ".rs"), os.path.join(base, m.group(1), "mod.rs")):
                if os.path.exists(cand):
                    found.add(os.path.normpath(cand))
    return found


# ---------------------------------------------------------------- imports

def module_of(src, path):
    parts = os.path.relpath(path, src)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def file_of(src, parts):
    """The file defining the longest prefix of `parts`."""
    for k in range(len(parts), -1, -1):
        base = os.path.join(src, *parts[:k]) if k else src
        for cand in ([base + ".rs", os.path.join(base, "mod.rs")] if k else
                     [os.path.join(src, "lib.rs"), os.path.join(src, "main.rs")]):
            if os.path.exists(cand):
                return os.path.normpath(cand)
    return None


def use_paths(code):
    """Every path a file names: `use` trees expanded, and inline paths."""
    paths = []

    def expand(prefix, tree):
        tree = tree.strip()
        if not tree:
            return
        if tree.startswith("{"):
            depth, cur, items = 0, "", []
            for ch in tree[1:-1]:
                if ch == "," and depth == 0:
                    items.append(cur)
                    cur = ""
                    continue
                depth += ch == "{"
                depth -= ch == "}"
                cur += ch
            items.append(cur)
            for it in items:
                expand(prefix, it)
            return
        m = re.match(r"([\w:]*?)(::)?(\{.*\})$", tree, re.S)
        if m and m.group(3):
            head = [p for p in m.group(1).split("::") if p]
            expand(prefix + head, m.group(3))
            return
        name = re.split(r"\s+as\s+", tree)[0].strip()
        paths.append(prefix + [p for p in name.split("::") if p and p != "*"])

    for m in re.finditer(r"\buse\s+([^;]+);", code):
        expand([], re.sub(r"\s+", " ", m.group(1)))
    for m in re.finditer(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", code):
        paths.append(m.group(1).split("::"))
    return paths


def resolve(src, here, path):
    if not path:
        return None
    if path[0] == "crate":
        parts = path[1:]
    elif path[0] in ("super", "self"):
        parts = list(here)
        p = path
        while p and p[0] in ("super", "self"):
            if p[0] == "super":
                parts = parts[:-1]
            p = p[1:]
        parts += p
    else:
        # A 2018-edition path relative to this module: `use child::X`.
        child = file_of(src, here + path[:1])
        mine = file_of(src, here)
        if child is None or child == mine:
            return None
        parts = here + path
    return file_of(src, parts)


def import_graph(src, tree):
    tests = test_only_files(src)
    edges = {}
    for path in rust_files(tree):
        path = os.path.normpath(path)
        if path in tests:
            continue
        code = strip_comments(open(path).read())
        spans = test_spans(code)
        live = "".join(ch if (ch == "\n" or not in_spans(i, spans)) else " " for i, ch in enumerate(code)) \
            if spans else code
        here = module_of(src, path)
        outs = set()
        for p in use_paths(live):
            target = resolve(src, here, p)
            if target and target != path and target.startswith(os.path.normpath(tree)) and target not in tests:
                outs.add(target)
        edges[path] = outs
    return edges


def circles(edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def back_up(src, edges):
    """Arrows from a file to one of its ancestor modules' files."""
    found = []
    for a, outs in edges.items():
        mod_a = module_of(src, a)
        for b in outs:
            mod_b = module_of(src, b)
            if os.path.basename(b) in ("mod.rs", "lib.rs") and len(mod_b) < len(mod_a) and mod_a[:len(mod_b)] == mod_b:
                found.append((a, b))
    return sorted(found)


def check_imports(report):
    bad = 0
    for src_rel, tree_rel, _ in IMPORT_TREES:
        src, tree = os.path.join(ROOT, src_rel), os.path.join(ROOT, tree_rel)
        edges = import_graph(src, tree)
        n_edges = sum(len(v) for v in edges.values())
        cs, ups = circles(edges), back_up(src, edges)
        print(f"imports {tree_rel}: {len(edges)} files, {n_edges} arrows, "
              f"{len(cs)} circles, {len(ups)} arrows back up")
        for c in cs:
            print("  circle: " + " ".join(rel(f) for f in c))
        for a, b in ups:
            print(f"  back up: {rel(a)} -> {rel(b)}")
        if report:
            for a in sorted(edges):
                if edges[a]:
                    print(f"    {os.path.relpath(a, tree)} -> " +
                          ", ".join(sorted(os.path.relpath(b, tree) for b in edges[a])))
        bad += len(cs) + len(ups)
    return bad


# -------------------------------------------------------------- functions

FN_RE = re.compile(r"(?m)^[ \t]*(?:pub(?:\([^)]*\))?\s+)?(?:(?:const|async|unsafe|extern\s+\"C\")\s+)*fn\s+(\w+)")


def functions(path):
    text = open(path).read()
    code = strip_comments(text)
    spans = test_spans(code)
    for m in FN_RE.finditer(code):
        if in_spans(m.start(), spans):
            continue
        brace = code.find("{", m.end())
        semi = code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration without a body
        end = matching_brace(code, brace)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, end) + 1
        yield m.group(1), first, last - first + 1


def check_functions(report, limit):
    found = []
    for top in FN_ROOTS:
        for root, _, _ in [(os.path.join(ROOT, top), None, None)]:
            srcs = [d for d, _, fs in os.walk(root) if os.path.basename(d) == "src"]
            tests = set()
            for s in srcs:
                tests |= test_only_files(s)
            for path in rust_files(root):
                path = os.path.normpath(path)
                if path in tests or "/fuzz/" in path:
                    continue
                for name, line, n in functions(path):
                    found.append((n, rel(path), line, name))
    found.sort(reverse=True)
    over = [f for f in found if f[0] > limit]
    print(f"functions outside tests: {len(found)}, longest {found[0][0]} lines "
          f"({found[0][3]} at {found[0][1]}:{found[0][2]}), {len(over)} over {limit} lines")
    for n, path, line, name in (found[:25] if report else over):
        print(f"  {n:4} {path}:{line} {name}")
    return len(over)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", choices=["imports", "functions", "all"], default="all")
    ap.add_argument("--report", action="store_true", help="print the graph and the 25 longest functions")
    ap.add_argument("--limit", type=int, default=FN_LIMIT, help="longest function allowed (lines)")
    a = ap.parse_args()
    bad = 0
    if a.what in ("imports", "all"):
        bad += check_imports(a.report)
    if a.what in ("functions", "all"):
        bad += check_functions(a.report, a.limit)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

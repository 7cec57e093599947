#!/usr/bin/env python3
"""Link check for README.md and the mdBook under docs/ (standard library only).

Checks, for README.md and every docs/src/**/*.md:
  * every relative link or image target exists (a file or a directory);
  * a #anchor names a heading of the target page (mdBook's heading ids,
    read from the built HTML in docs/book when it exists, else computed);
  * every {{#include path}} exists;
  * every backquoted repository path (`crates/...`, `scripts/...`, ...)
    exists, so no page names a file that is gone;
  * every page in docs/src is listed in docs/src/SUMMARY.md, every entry of
    SUMMARY.md exists, and every page is reachable from README.md by links
    (SUMMARY.md, the book's sidebar, counts as linked from every page).
Prints one line per problem and exits 1 if there is any.
"""
import html
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SRC = os.path.join(ROOT, "docs", "src")
BOOK = os.path.join(ROOT, "docs", "book")
SUMMARY = os.path.join(SRC, "SUMMARY.md")
README = os.path.join(ROOT, "README.md")

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INCLUDE = re.compile(r"(?<!\\)\{\{#include\s+([^}\s:]+)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
REPO_PATH = re.compile(r"^(crates|scripts|deploy|docs|tests|fuzz|src|\.ci)/[A-Za-z0-9_.\-/]*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")

problems = []


def rel(path):
    return os.path.relpath(path, ROOT)


def prose_lines(text):
    """Yield (line number, line) outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        s = line.lstrip()
        m = re.match(r"(`{3,}|~{3,})", s)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
                continue
            if s.startswith(fence):
                fence = None
                continue
        if fence is None:
            yield n, line


def normalize_id(text):
    out = []
    for ch in text:
        if ch.isalnum() or ch in "_-":
            out.append(ch.lower() if ch.isascii() else ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def heading_text(md):
    md = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", md)  # links: their text
    md = re.sub(r"<[^>]*>", "", md)
    md = md.replace("`", "").replace("*", "")
    return md


def computed_ids(path):
    ids, seen = set(), {}
    for _, line in prose_lines(open(path, encoding="utf-8").read()):
        m = HEADING.match(line)
        if not m:
            continue
        base = normalize_id(heading_text(m.group(2)).strip())
        n = seen.get(base, 0)
        ids.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return ids


_ids = {}


def anchors_of(path):
    """Heading ids of a page: from the built book if there, else computed."""
    if path in _ids:
        return _ids[path]
    ids = None
    if path.startswith(SRC + os.sep) and os.path.isdir(BOOK):
        page = os.path.join(BOOK, os.path.relpath(path, SRC))[:-3] + ".html"
        if os.path.exists(page):
            body = open(page, encoding="utf-8").read()
            main = body.split('<main>', 1)[-1]
            ids = {html.unescape(i) for i in re.findall(r'<h[1-6] id="([^"]+)"', main)}
    if ids is None:
        ids = computed_ids(path)
    _ids[path] = ids
    return ids


def check_file(path, graph):
    text = open(path, encoding="utf-8").read()
    here = os.path.dirname(path)
    graph[path] = set()
    for n, line in prose_lines(text):
        spans = [m.span() for m in CODE_SPAN.finditer(line)]
        for m in LINK.finditer(line):
            if any(a <= m.start() < b for a, b in spans):
                continue
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, …
                continue
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(here, file_part)) if file_part else path
            where = f"{rel(path)}:{n}"
            if not os.path.exists(dest):
                problems.append(f"{where}: link to a missing file: {target}")
                continue
            if dest.endswith(".md"):
                graph[path].add(dest)
                if anchor and anchor not in anchors_of(dest):
                    problems.append(f"{where}: no heading #{anchor} in {rel(dest)}")
            elif anchor:
                problems.append(f"{where}: anchor on a file that is not a page: {target}")
        for m in INCLUDE.finditer(line):
            dest = os.path.normpath(os.path.join(here, m.group(1)))
            if not os.path.isfile(dest):
                problems.append(f"{rel(path)}:{n}: include of a missing file: {m.group(1)}")
        for m in CODE_SPAN.finditer(line):
            word = m.group(2).strip()
            word = re.split(r"::|:[0-9]", word)[0].rstrip(".,;:)")
            if not REPO_PATH.match(word) or word.startswith("docs/book"):
                continue
            if not os.path.exists(os.path.join(ROOT, word)):
                problems.append(f"{rel(path)}:{n}: names a path that does not exist: {word}")


def main():
    pages = []
    for d, _, files in os.walk(SRC):
        pages += [os.path.join(d, f) for f in files if f.endswith(".md")]
    pages.sort()
    graph = {}
    for p in pages + [README]:
        check_file(p, graph)

    summary = graph.get(SUMMARY, set())
    for p in pages:
        if p != SUMMARY and p not in summary:
            problems.append(f"{rel(p)}: not listed in docs/src/SUMMARY.md")

    # Reachability from the README; the sidebar (SUMMARY) is on every page.
    seen, todo = set(), [README]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        nxt = set(graph.get(p, ()))
        if p.startswith(SRC + os.sep):
            nxt |= summary
        todo += [q for q in nxt if q not in seen]
    for p in pages:
        if p != SUMMARY and p not in seen:
            problems.append(f"{rel(p)}: not reachable from README.md")

    for line in problems:
        print(line)
    n = len(pages) - 1
    if problems:
        print(f"docs-check: {len(problems)} problem(s) in README.md and {n} page(s)", file=sys.stderr)
        return 1
    print(f"docs-check: README.md and {n} page(s): every link, anchor, include and path resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())

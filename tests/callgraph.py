#!/usr/bin/env python3
"""No cycle among the files of a folder: file A depends on file B when A uses
(calls, or takes the address of) a global symbol that B defines, or A
#includes B. A cycle means no file of it can be read, changed or tested
without the others; kvcore/evict is kept a tree of files from the evictor
down to the ranking helpers (docs/ARCHITECTURE.md).

usage: callgraph.py FOLDER...   exits 1 and prints each cycle found"""
import os
import re
import sys

# A global definition at the start of a line: a function or an object,
# not static, not a declaration (";" before "{" or "=").
DEFINITION = re.compile(
    r"^(?!static\b|typedef\b|extern\b|#)[A-Za-z_][\w \t\*]*?\b(\w+)\s*(\([^;{]*\)\s*\{|=|\[[^;]*\]\s*=)",
    re.M | re.S)
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
INCLUDE = re.compile(r'^\s*#\s*include\s+"(?:[\w/]+/)?([\w.]+)"', re.M)


def strip_comments_and_strings(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def graph(folder):
    files = sorted(f for f in os.listdir(folder) if f.endswith((".c", ".h")))
    text = {f: strip_comments_and_strings(open(os.path.join(folder, f)).read()) for f in files}
    raw = {f: open(os.path.join(folder, f)).read() for f in files}
    owner = {}
    for f in files:
        if f.endswith(".c"):
            for m in DEFINITION.finditer(text[f]):
                owner.setdefault(m.group(1), f)
    edges = {f: set() for f in files}
    for f in files:
        for name in set(IDENT.findall(text[f])):
            g = owner.get(name)
            if g and g != f and f.endswith(".c"):
                edges[f].add(g)
        for inc in INCLUDE.findall(raw[f]):
            if inc in edges and inc != f:
                edges[f].add(inc)
    return edges


def cycles(edges):
    """Each strongly connected component of more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main(folders):
    bad = 0
    for folder in folders:
        edges = graph(folder)
        for comp in cycles(edges):
            bad += 1
            links = [f"{a} -> {b}" for a in comp for b in sorted(edges[a]) if b in comp]
            print(f"{folder}: a cycle among {', '.join(comp)}: {'; '.join(links)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

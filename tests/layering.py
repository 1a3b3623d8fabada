#!/usr/bin/env python3
"""The libraries' layering, checked: every #include "folder/x.h" in a
library folder must name the folder itself or one the folder's meson.build
depends on (directly or through those). The meson.build files are the one
place the layering is written; this test keeps the code honest to them.

usage: layering.py SOURCE_ROOT"""
import os, re, sys

LIBS = ['kvcore', 'datasets', 'harness']
# Headers generated into the build folder, included unqualified.
GENERATED = {'version_gen.h'}

def folders(root):
    out = {}
    for lib in LIBS:
        for sub in sorted(os.listdir(os.path.join(root, lib))):
            path = os.path.join(root, lib, sub)
            if os.path.isfile(os.path.join(path, 'meson.build')):
                out[f'{lib}/{sub}'] = path
    return out

def direct_deps(path):
    """Folders named by the static_library's dependencies in PATH/meson.build."""
    text = open(os.path.join(path, 'meson.build')).read()
    m = re.search(r"static_library\([^)]*?dependencies\s*:\s*\[([^\]]*)\]", text, re.S)
    return re.findall(r'(\w+)_dep\b', m.group(1)) if m else []

def allowed_map(fold):
    def expand(name):
        if name in LIBS:                      # a whole library: all its folders
            return [f for f in fold if f.startswith(name + '/')]
        lib, _, sub = name.partition('_')
        return [f'{lib}/{sub}'] if f'{lib}/{sub}' in fold else []
    graph = {f: [g for d in direct_deps(p) for g in expand(d)] for f, p in fold.items()}
    closure = {}
    def reach(f, seen):
        for g in graph[f]:
            if g not in seen:
                seen.add(g)
                reach(g, seen)
        return seen
    for f in fold:
        closure[f] = reach(f, {f})
    return closure

def main():
    root = sys.argv[1]
    fold = folders(root)
    by_name = {f.split('/')[1]: f for f in fold}
    allowed = allowed_map(fold)
    bad = 0
    for f, path in fold.items():
        for name in sorted(os.listdir(path)):
            if not name.endswith(('.c', '.h')):
                continue
            file = os.path.join(path, name)
            for no, line in enumerate(open(file, encoding='utf-8'), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                inc = m.group(1)
                rel = os.path.relpath(file, root)
                head = inc.split('/')[0]
                if '/' not in inc:
                    if inc not in GENERATED:
                        print(f'{rel}:{no}: include "{inc}" names no folder (write "{f.split("/")[1]}/{inc}" or its folder)')
                        bad += 1
                elif head not in by_name:
                    print(f'{rel}:{no}: include "{inc}": no library folder "{head}"')
                    bad += 1
                elif by_name[head] not in allowed[f]:
                    ok = ', '.join(sorted(g for g in allowed[f]))
                    print(f'{rel}:{no}: {f} may not include "{inc}" (it may use: {ok}; see {f}/meson.build)')
                    bad += 1
    n = len(fold)
    print(f'{"ok" if not bad else "FAIL"}: {n} folders, {bad} layering violations')
    return 1 if bad else 0

sys.exit(main())

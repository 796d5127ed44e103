#!/usr/bin/env python3
"""The module graph of a crate, from its `crate::` paths, and a check that it has no cycle.

Usage: python3 ci/modgraph.py [--check] [--dot] <crate>/src

Each file is a module (`a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`); an edge a -> b
is any `crate::b...` path in a's code, `use crate::{b, c::d}` groups included. Test code
(`#[cfg(test)]` modules) is left out: tests may reach anywhere. Edges are counted between
top-level modules, since a cycle through submodules of one top-level module is that
module's own business. `--check` exits 1 and names the cycles when there are any, when a
type private to one room (`ROOM_PRIVATE`) is named outside it, and (in the engine) when
anything but the commit point swaps a shard's state, commits its manifest or releases a
protection (`COMMIT_ONLY`), when anything but the table store makes an object-store
request (`STORE_ONLY`), and when a module uses one of a layer above its own
(`ENGINE_LAYERS`).
"""
import os
import re
import sys

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Types only their own top-level module may name (the engine's shard internals).
ROOM_PRIVATE = {"ShardInner": "shard"}

# What only the commit point may do (issue 21's one commit point): swap a shard's state,
# commit a manifest of its tree, or release a protection by hand. Pattern -> the one file
# (relative to the crate's src) where it may appear.
COMMIT_ONLY = {
    r"\bstate\.write\(\)": ("shard/commit.rs",),
    r"\bcommit_manifest\(": ("shard/commit.rs",),
    r"\bin_flight\.0\b": ("shard/commit.rs",),
    r"\.settle\(": ("shard/commit.rs",),
    r"\.settle_job\(": ("shard/commit.rs",),
    r"\.install\(": ("shard/commit.rs",),
    # The manifest store's CAS: the commit point's, and the open's epoch bump that fences
    # older writers before this writer's commit point exists (it changes no tree).
    r"\bmanifests\.commit\(": ("shard/commit.rs", "shard/open.rs"),
}


# Object-store requests only the table store makes (issue 21: one owner of object I/O).
# Without `ObjectStoreExt` in scope a store's GET, HEAD, PUT and DELETE do not compile; the
# requests on the `ObjectStore` trait itself and the objstore crate's helpers are named
# here. Pattern -> the directory (relative to the crate's src) that may make them.
STORE_ONLY = {
    r"\bObjectStoreExt\b": "store/",
    r"\.(put_opts|put_multipart_opts|get_opts|get_ranges|delete_stream|list_with_offset"
    r"|list_with_delimiter|copy_opts|rename_opts)\(": "store/",
    r"\.list\((Some|None)\b": "store/",
    r"\bcreate_or_match\(": "store/",
    r"\bBufWriter::new\(": "store/",
}

# The engine's layers, bottom first (issue 21: dependencies point one way). A module may
# use modules of its own layer or below, never above; within a layer the cycle check
# keeps the edges one way. A new top-level module must be given a layer here.
ENGINE_LAYERS = [
    (
        "record primitives and process utilities that call nothing above them",
        {"error", "node", "varint", "value", "row", "entry", "keycodec", "iter", "fold",
         "history", "promotion", "background", "reclaim", "localfs"},
    ),
    (
        "formats, codecs and settings, and the table store (every object-store request,"
        " the block cache) between the row formats below it and the columnar one above",
        {"config", "schema", "sst", "wal", "store", "columnar", "memtable", "deep_run"},
    ),
    (
        "the job protocol in the bucket, and the version set (the tree's state and edits)",
        {"jobs", "state", "version", "metrics"},
    ),
    (
        "the subsystems: compaction, offload, GC, reads and scans, hotness, backpressure,"
        " ownership",
        {"compaction", "offload", "gc", "read", "hotness", "context", "backpressure",
         "cluster"},
    ),
    (
        "the shard and the Db",
        {"shard", "db", "testkit"},
    ),
]


def layer_violations(g):
    """(messages) for modules without a layer and edges that point up."""
    layer = {}
    for i, (_, mods) in enumerate(ENGINE_LAYERS):
        for m in mods:
            layer[m] = i
    out = []
    for m in sorted(g):
        if m not in layer:
            out.append(f"module `{m}` has no layer in ci/modgraph.py's ENGINE_LAYERS")
    for a in sorted(g):
        for b in sorted(g[a]):
            if a in layer and b in layer and layer[b] > layer[a]:
                out.append(
                    f"`{a}` ({ENGINE_LAYERS[layer[a]][0]}) uses `{b}`, a layer above it"
                    f" ({ENGINE_LAYERS[layer[b]][0]})"
                )
    return out


# The whole shard is named only at its top (the `Shard` API and its open); every task
# and coordinator of the shard takes a narrow context of the parts it uses (issue 21).
# Pattern -> the files where it may appear.
SHARD_TOP = {
    r"\bShardInner\b": ("shard/mod.rs", "shard/open.rs"),
}


def module_of(root, path):
    rel = os.path.relpath(path, root)[: -len(".rs")].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return None
    return rel[0]


def strip_tests_and_comments(text):
    # Cut `#[cfg(test)]` items: a `mod name { ... }` block by brace matching.
    out = []
    i = 0
    while True:
        j = text.find("#[cfg(test)]", i)
        if j < 0:
            out.append(text[i:])
            break
        out.append(text[i:j])
        k = j + len("#[cfg(test)]")
        m = re.compile(r"\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{").match(text, k)
        if not m:
            # An attribute on something else (a function, a use): skip just the attribute.
            i = k
            continue
        depth = 0
        p = m.end() - 1
        while p < len(text):
            if text[p] == "{":
                depth += 1
            elif text[p] == "}":
                depth -= 1
                if depth == 0:
                    break
            p += 1
        i = p + 1
    text = "".join(out)
    text = re.sub(r"//[^\n]*", "", text)
    return text


def group_heads(text, start):
    """The first identifier of each comma-separated item in the brace group at `start`."""
    heads = []
    depth = 0
    item_start = start + 1
    p = start
    while p < len(text):
        c = text[p]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                heads.append(text[item_start:p])
                break
        elif c == "," and depth == 1:
            heads.append(text[item_start:p])
            item_start = p + 1
        p += 1
    names = []
    for h in heads:
        m = IDENT.search(h)
        if m:
            names.append(m.group(0))
    return names


def edges_of(text, modules):
    found = set()
    for m in re.finditer(r"\bcrate::", text):
        p = m.end()
        while p < len(text) and text[p].isspace():
            p += 1
        if p < len(text) and text[p] == "{":
            names = group_heads(text, p)
        else:
            im = IDENT.match(text, p)
            names = [im.group(0)] if im else []
        for n in names:
            if n in modules:
                found.add(n)
    return found


def graph(root):
    files = []
    for d, _, fs in os.walk(root):
        for f in fs:
            if f.endswith(".rs"):
                files.append(os.path.join(d, f))
    modules = {module_of(root, f) for f in files} - {None}
    g = {m: set() for m in modules}
    for f in files:
        src = module_of(root, f)
        if src is None:
            continue
        with open(f, encoding="utf-8") as fh:
            text = strip_tests_and_comments(fh.read())
        g[src] |= edges_of(text, modules) - {src}
    return g


def cycles(g):
    """Strongly connected components with more than one module (Tarjan)."""
    index = {}
    low = {}
    stack = []
    on = set()
    out = []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
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
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def sources(root):
    """(path relative to `root`, top-level module, code without tests and comments) of
    every Rust file under `root`."""
    for d, _, fs in os.walk(root):
        for f in fs:
            if f.endswith(".rs"):
                path = os.path.join(d, f)
                with open(path, encoding="utf-8") as fh:
                    text = strip_tests_and_comments(fh.read())
                yield os.path.relpath(path, root), module_of(root, path), text


def room_leaks(root):
    """(file, type) pairs where a room-private type is named outside its room."""
    leaks = []
    for rel, module, text in sources(root):
        for name, room in ROOM_PRIVATE.items():
            if module != room and re.search(r"\b" + name + r"\b", text):
                leaks.append((rel, name))
    return sorted(leaks)


def commit_leaks(root):
    """(file, pattern) pairs where what only the commit point may do is done elsewhere."""
    leaks = []
    for rel, _, text in sources(root):
        for pattern, home in COMMIT_ONLY.items():
            if rel not in home and re.search(pattern, text):
                leaks.append((rel, pattern))
    return sorted(leaks)


def store_leaks(root):
    """(file, pattern) pairs where an object-store request is made outside the table store."""
    leaks = []
    for rel, _, text in sources(root):
        for pattern, home in STORE_ONLY.items():
            if not rel.startswith(home) and re.search(pattern, text):
                leaks.append((rel, pattern))
    return sorted(leaks)


def top_leaks(root):
    """(file, pattern) pairs where the whole shard is named below its top."""
    leaks = []
    for rel, _, text in sources(root):
        for pattern, homes in SHARD_TOP.items():
            if rel not in homes and re.search(pattern, text):
                leaks.append((rel, pattern))
    return sorted(leaks)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = {a for a in sys.argv[1:] if a.startswith("--")}
    root = args[0] if args else "crates/strata-engine/src"
    g = graph(root)
    comps = cycles(g)
    if "--dot" in flags:
        print("digraph modules {")
        for a in sorted(g):
            for b in sorted(g[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")
        return 0
    leaks = room_leaks(root)
    for path, name in leaks:
        print(f"{path} names {name}, which only `{ROOM_PRIVATE[name]}` may")
    if root.rstrip("/").endswith("strata-engine/src"):
        commits = commit_leaks(root)
        for path, pattern in commits:
            print(f"{path} matches {pattern}, which only {', '.join(COMMIT_ONLY[pattern])} may")
        leaks = leaks + commits
        layered = layer_violations(g)
        for message in layered:
            print(message)
        leaks = leaks + layered
        requests = store_leaks(root)
        for path, pattern in requests:
            print(f"{path} matches {pattern}: only the table store ({STORE_ONLY[pattern]}) makes object-store requests")
        leaks = leaks + requests
        tops = top_leaks(root)
        for path, pattern in tops:
            print(f"{path} matches {pattern}: only {', '.join(SHARD_TOP[pattern])} may; give the task a context of the parts it uses")
        leaks = leaks + tops
    if not comps:
        print(f"{root}: {len(g)} modules, no cycle")
        return 1 if leaks and "--check" in flags else 0
    for comp in comps:
        inside = set(comp)
        print(f"cycle among {len(comp)} modules: {', '.join(comp)}")
        for a in comp:
            back = sorted(b for b in g[a] if b in inside)
            print(f"  {a} -> {', '.join(back)}")
    return 1 if "--check" in flags else 0


if __name__ == "__main__":
    sys.exit(main())

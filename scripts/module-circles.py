#!/usr/bin/env python3
"""Fails when the modules of a crate import each other in a circle.

Each crate should read bottom-up: a module uses the modules below it, never one that uses it
back. This reads every path that starts at `crate::`, `super::` or `self::` in a crate's
sources (test modules and comments left out: a test may reach anywhere), follows the names
each module imports or re-exports (`pub use runtime::error::Error` in lib.rs makes
`crate::Error` a use of `runtime::error`; globs and `as` included), and reports every strongly
connected group among the child modules of any module, with the lines that tie them.
`make test` and `make lint` run it over every crate of the workspace, after its self-test.

    python3 scripts/module-circles.py [CRATE_DIR ...]   # default: every workspace member
    python3 scripts/module-circles.py --self-test       # shows it finds planted circles
"""

import os
import re
import sys
import tempfile

ANCHOR = re.compile(r"(?<![\w:])(crate|super|self)\s*::")
USE = re.compile(r"(?<![\w:])use\s+")
MODULE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
TESTS = re.compile(
    r"^\s*#\[cfg\(test\)\]\s*\n(?:\s*#\[[^\]]*\]\s*\n)*\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{",
    re.M,
)
ITEM = re.compile(
    r"^\s*pub(?:\([^)]*\))?\s+(?:async\s+|const\s+|unsafe\s+)*"
    r"(?:struct|enum|fn|const|static|type|trait|mod|union)\s+(\w+)",
    re.M,
)
TOKEN = re.compile(r"\s*(\w+|\*|\{)")
ALIAS = re.compile(r"\s+as\s+(\w+)")
SEPARATOR = re.compile(r"\s*::")
GROUP_NEXT = re.compile(r"\s*([,}])")
LITERALS = re.compile(r'"(?:[^"\\]|\\.)*"')
COMMENT = re.compile(r"//.*$", re.M)
BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def code_of(text):
    """The source without test modules (from the first on: by convention the end of a file),
    string literals and comments (doc links are not uses)."""
    match = TESTS.search(text)
    text = text if match is None else text[: match.start()]
    text = LITERALS.sub('""', text)
    text = BLOCK_COMMENT.sub("", text)
    return COMMENT.sub("", text)


def parse_tree(text, at):
    """The paths of the use tree (or plain path) at `at`, each a list of segments (the last
    may be `as:<alias>`), and where it ends. `a::{b, c::{d}, e as f}` gives a::b, a::c::d and
    a::e with its alias."""
    prefix = []
    while True:
        token = TOKEN.match(text, at)
        if token is None:
            return [prefix], at
        if token.group(1) == "{":
            at = token.end()
            paths = []
            while True:
                if re.compile(r"\s*\}").match(text, at):
                    at = re.compile(r"\s*\}").match(text, at).end()
                    break
                inner, at = parse_tree(text, at)
                paths.extend(prefix + path for path in inner if path)
                following = GROUP_NEXT.match(text, at)
                if following is None:
                    return paths, at
                at = following.end()
                if following.group(1) == "}":
                    break
            return paths, at
        prefix.append(token.group(1))
        at = token.end()
        alias = ALIAS.match(text, at)
        if alias:
            return [prefix + ["as:" + alias.group(1)]], alias.end()
        separator = SEPARATOR.match(text, at)
        if separator is None:
            return [prefix], at
        at = separator.end()


class Crate:
    """The module tree of one crate: each module's path, file, children, items and imports."""

    def __init__(self, src):
        self.children = {}  # module path (tuple) -> child names
        self.items = {}  # module path -> names it declares public
        self.imports = {}  # module path -> {name: absolute segments it stands for}
        self.globs = {}  # module path -> absolute module paths it imports with `*`
        self.files = {}  # file -> module path
        self.code = {}  # file -> its code (see code_of)
        root = next(
            (os.path.join(src, f) for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(src, f))),
            None,
        )
        if root is not None:
            self.read((), root, src)
            for file, module in self.files.items():
                self.read_imports(module, self.code[file])

    def read(self, path, file, folder):
        """Reads the module at `path` from `file`; its children live in `folder`."""
        self.files[file] = path
        with open(file) as f:
            text = code_of(f.read())
        self.code[file] = text
        names = MODULE.findall(text)
        self.children[path] = set(names)
        self.items[path] = set(ITEM.findall(text))
        for name in names:
            for candidate in (os.path.join(folder, name + ".rs"), os.path.join(folder, name, "mod.rs")):
                if os.path.exists(candidate):
                    self.read(path + (name,), candidate, os.path.join(folder, name))
                    break

    def absolute(self, module, segments):
        """`segments` of a path written in `module`, from the crate root; `None` when the path
        leaves the crate (another crate, the standard library)."""
        if not segments:
            return None
        head = segments[0]
        if head == "crate":
            return segments[1:]
        if head in ("self", "super"):
            base = list(module)
            rest = segments
            while rest and rest[0] in ("self", "super"):
                if rest[0] == "super":
                    if not base:
                        return None
                    base.pop()
                rest = rest[1:]
            return base + rest
        if head in self.children.get(module, ()) or head in self.imports.get(module, {}):
            return list(module) + segments
        return None

    def read_imports(self, module, text):
        """The names `module`'s `use` statements bring in, public or not (a child sees its
        parent's private imports as `super::name`)."""
        imports = self.imports.setdefault(module, {})
        globs = self.globs.setdefault(module, [])
        for use in USE.finditer(text):
            paths, _ = parse_tree(text, use.end())
            for path in paths:
                alias = path[-1][3:] if path and path[-1].startswith("as:") else None
                path = [p for p in (path[:-1] if alias else path) if p]
                if not path:
                    continue
                if path[-1] == "self":
                    path = path[:-1]
                target = self.absolute(module, path)
                if target is None:
                    continue
                if target and target[-1] == "*":
                    globs.append(tuple(target[:-1]))
                elif target:
                    imports[alias or target[-1]] = target

    def resolve(self, base, segments, depth=0):
        """The module a path below `base` lands in: its deepest module, through imports."""
        path = tuple(base)
        for index, segment in enumerate(segments):
            if segment in ("self", "") or segment.startswith("as:"):
                continue
            if segment in self.children.get(path, ()):
                path = path + (segment,)
                continue
            if depth < 16 and segment in self.imports.get(path, {}):
                target = self.imports[path][segment]
                return self.resolve((), list(target) + list(segments[index + 1:]), depth + 1)
            for glob in self.globs.get(path, []):
                if depth < 16 and (segment in self.items.get(glob, ()) or segment in self.children.get(glob, ())):
                    return self.resolve(glob, segments[index:], depth + 1)
            break
        return path

    def edges(self):
        """(parent, from child, to child) -> the first `file:line` where one names the other."""
        found = {}
        for file, module in sorted(self.files.items()):
            text = self.code[file]
            for anchor in ANCHOR.finditer(text):
                paths, _ = parse_tree(text, anchor.end())
                line = text.count("\n", 0, anchor.start()) + 1
                for path in paths:
                    segments = self.absolute(module, [anchor.group(1)] + path)
                    if segments is None:
                        continue
                    target = self.resolve((), segments)
                    common = 0
                    while common < min(len(module), len(target)) and module[common] == target[common]:
                        common += 1
                    if common == len(module) or common == len(target):
                        continue  # an ancestor or a descendant: not a sibling's
                    key = (module[:common], module[common], target[common])
                    found.setdefault(key, f"{file}:{line}")
            # Names imported without an anchor (`use child::x` in a parent, or through a
            # parent's import) are uses too.
            for name, target in self.imports.get(module, {}).items():
                target = self.resolve((), target)
                common = 0
                while common < min(len(module), len(target)) and module[common] == target[common]:
                    common += 1
                if common < len(module) and common < len(target):
                    found.setdefault((module[:common], module[common], target[common]), f"{file}: use of {name}")
        return found


def circles(edges, nodes):
    """The strongly connected groups of more than one node (Tarjan)."""
    graph = {node: sorted({b for (a, b) in edges if a == node}) for node in nodes}
    index, low, stack, on_stack, groups, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for next_node in graph.get(node, []):
            if next_node not in index:
                visit(next_node)
                low[node] = min(low[node], low[next_node])
            elif next_node in on_stack:
                low[node] = min(low[node], index[next_node])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in nodes:
        if node not in index:
            visit(node)
    return groups


def check(crate_dir):
    """The report of a crate's circles, at every level of its module tree; empty when none."""
    crate = Crate(os.path.join(crate_dir, "src"))
    edges = crate.edges()
    report = []
    for parent, children in sorted(crate.children.items()):
        siblings = {(a, b): where for (p, a, b), where in edges.items() if p == parent}
        for group in circles(siblings, sorted(children)):
            where = "::".join(("crate",) + parent)
            report.append(f"{crate_dir}: modules of {where} in a circle: {', '.join(group)}")
            for (a, b), line in sorted(siblings.items()):
                if a in group and b in group:
                    report.append(f"  {a} -> {b}  ({line})")
    return report


def workspace_members(root):
    with open(os.path.join(root, "Cargo.toml")) as f:
        text = f.read()
    members = re.search(r"members\s*=\s*\[(.*?)\]", text, re.S).group(1)
    return [os.path.join(root, m) for m in re.findall(r'"([^"]+)"', members)]


def planted(files):
    """The report for a crate made of `files` (path below src -> text)."""
    with tempfile.TemporaryDirectory() as crate:
        for name, text in files.items():
            path = os.path.join(crate, "src", name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        return check(crate)


def self_test():
    def circle(report, where, members):
        return any(f"{where} in a circle: {members}" in line for line in report)

    # Through a root re-export, a nested group, a parent's re-export seen as super::.
    report = planted({
        "lib.rs": "mod a;\npub mod b;\nmod c;\npub use c::{Thing, Other as O};\n",
        "a.rs": "use crate::b::x;\n// crate::c in a comment is no use\nconst S: &str = \"crate::c\";\n",
        "b/mod.rs": "mod inner;\nmod outer;\n",
        "b/inner.rs": "fn f() -> crate::O { todo!() }\nuse super::outer::Z;\n",
        "b/outer.rs": "use super::{inner::{Y}};\n",
        "c.rs": "use crate::{a::y, d};\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\n",
    })
    assert circle(report, "crate", "a, b, c"), report
    assert circle(report, "crate::b", "inner, outer"), report
    assert not any("c -> b" in line or "a -> c" in line for line in report), report

    # Through a re-export of a deeper path, a glob, and a group after a path.
    report = planted({
        "lib.rs": "pub mod x;\npub mod y;\npub use x::deep::Error;\n",
        "x/mod.rs": "pub mod deep;\npub mod other;\n",
        "x/deep.rs": "pub struct Error;\n",
        "x/other.rs": "use crate::y::*;\nfn f() -> Thing { todo!() }\n",
        "y/mod.rs": "pub mod z;\npub use z::*;\n",
        "y/z.rs": "pub struct Thing;\nfn g() -> crate::Error { todo!() }\n",
    })
    assert circle(report, "crate", "x, y"), report
    report = planted({
        "lib.rs": "pub mod p;\npub mod q;\n",
        "p.rs": "use crate::q::{r, s};\n",
        "q/mod.rs": "pub mod r;\npub mod s;\n",
        "q/r.rs": "use super::super::p::Thing;\n",
        "q/s.rs": "",
    })
    assert circle(report, "crate", "p, q"), report

    # No circle: no report.
    report = planted({
        "lib.rs": "mod a;\nmod b;\npub use a::A;\n",
        "a.rs": "pub struct A;\n",
        "b.rs": "use crate::A;\n",
    })
    assert report == [], report
    print("module-circles: self-test passed")


def main(args):
    if args == ["--self-test"]:
        self_test()
        return 0
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    crates = args or workspace_members(root)
    report = [line for crate in crates for line in check(crate)]
    for line in report:
        print(line)
    if report:
        print("module-circles: move the shared names down into a module both can use")
        return 1
    print(f"module-circles: no circles in {len(crates)} crates")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

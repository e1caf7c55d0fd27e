#!/usr/bin/env python3
"""Fails when the top-level modules of a crate import each other in a circle.

Each crate should read bottom-up: a module uses the modules below it, never one that uses it
back. This reads every `crate::name` path in a crate's sources (test modules left out: a test
may reach anywhere), resolves names the crate root re-exports (`pub use context::Error` makes
`crate::Error` a use of `context`), and reports every strongly connected group of modules with
the lines that tie them. `make test` runs it over every crate of the workspace.

    python3 scripts/module-circles.py [CRATE_DIR ...]   # default: every workspace member
    python3 scripts/module-circles.py --self-test       # shows it finds a planted circle
"""

import os
import re
import sys
import tempfile

PATH = re.compile(r"\b(crate|super|self)((?:::super)*)::(\{[^;]*?\}|\w+(?:::\w+)*)", re.S)
REEXPORT = re.compile(r"^\s*pub(?:\([^)]*\))?\s+use\s+(\w+)::(\{[^;]*?\}|\w+)\s*;", re.M | re.S)
MODULE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
TESTS = re.compile(r"^\s*#\[cfg\(test\)\]\s*\n\s*(?:pub\s+)?mod\s+\w+\s*\{", re.M)
COMMENT = re.compile(r"//.*$", re.M)


def code_of(text):
    """The source without comments (doc links are not uses) and from its first inline test
    module on (by convention the end of a file; a test may reach anywhere)."""
    match = TESTS.search(text)
    text = text if match is None else text[: match.start()]
    return COMMENT.sub("", text)


def split_items(group):
    """The paths in `{a, b::c, d as e}`, or the one path given."""
    if not group.startswith("{"):
        return [group]
    inner, depth, part, parts = group[1:-1], 0, "", []
    for char in inner:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += char
    parts.append(part)
    return [p.strip().split(" ")[0] for p in parts if p.strip()]


class Crate:
    """The module tree of one crate: each module's path, file, children and re-exports."""

    def __init__(self, src):
        self.children = {}  # module path (tuple) -> child names
        self.reexports = {}  # module path -> {name: child it comes from}
        self.files = {}  # file -> module path
        root = next(
            (os.path.join(src, f) for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(src, f))),
            None,
        )
        if root is not None:
            self.read((), root, src)

    def read(self, path, file, folder):
        """Reads the module at `path` from `file`; its children live in `folder`."""
        self.files[file] = path
        with open(file) as f:
            text = code_of(f.read())
        names = MODULE.findall(text)
        self.children[path] = set(names)
        self.reexports[path] = {
            item.split("::")[-1]: child
            for child, group in REEXPORT.findall(text)
            if child in names
            for item in split_items(group)
        }
        for name in names:
            for candidate, child_folder in (
                (os.path.join(folder, name + ".rs"), os.path.join(folder, name)),
                (os.path.join(folder, name, "mod.rs"), os.path.join(folder, name)),
            ):
                if os.path.exists(candidate):
                    self.read(path + (name,), candidate, child_folder)
                    break

    def resolve(self, base, segments):
        """The module a path below `base` lands in (its deepest module, through re-exports)."""
        path = base
        for segment in segments:
            if segment in self.children.get(path, ()):
                path = path + (segment,)
            elif segment in self.reexports.get(path, {}):
                path = path + (self.reexports[path][segment],)
            else:
                break
        return path

    def edges(self):
        """(parent, from child, to child) -> the first `file:line` where one names the other."""
        found = {}
        for file, module in sorted(self.files.items()):
            with open(file) as f:
                text = code_of(f.read())
            is_folder_root = os.path.basename(file) in ("mod.rs", "lib.rs", "main.rs")
            # `super` in a folder's mod.rs is the folder's parent; in a file, the file's parent.
            here = module if is_folder_root else module
            for match in PATH.finditer(text):
                anchor, supers, group = match.groups()
                if anchor == "crate":
                    base = ()
                else:
                    ups = (1 if anchor == "super" else 0) + supers.count("super")
                    base = here[: len(here) - ups] if ups <= len(here) else ()
                prefix, _, rest = group.partition("::{") if "::{" in group else (group, "", "")
                heads = prefix.split("::")
                if rest:
                    targets = [
                        self.resolve(self.resolve(base, heads), item.split("::"))
                        for item in split_items("{" + rest)
                    ]
                elif group.startswith("{"):
                    targets = [self.resolve(base, item.split("::")) for item in split_items(group)]
                else:
                    targets = [self.resolve(base, heads)]
                line = text.count("\n", 0, match.start()) + 1
                for target in targets:
                    common = 0
                    while common < min(len(module), len(target)) and module[common] == target[common]:
                        common += 1
                    if common == len(module) or common == len(target):
                        continue  # an ancestor or a descendant: not a sibling's
                    key = (module[:common], module[common], target[common])
                    found.setdefault(key, f"{file}:{line}")
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


def self_test():
    with tempfile.TemporaryDirectory() as crate:
        src = os.path.join(crate, "src")
        os.makedirs(os.path.join(src, "b"))
        files = {
            "lib.rs": "mod a;\npub mod b;\nmod c;\npub use c::{Thing, Other as O};\n",
            "a.rs": "use crate::b::x;\n// crate::c in a comment is no use\n",
            "b/mod.rs": "mod inner;\nmod outer;\n",
            "b/inner.rs": "fn f() -> crate::Thing { todo!() }\nuse super::outer::Z;\n",
            "b/outer.rs": "use super::{inner::Y};\n",
            "c.rs": "use crate::{a::y, d};\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\n",
        }
        for name, text in files.items():
            with open(os.path.join(src, name), "w") as f:
                f.write(text)
        report = check(crate)
        assert any("crate in a circle: a, b, c" in line for line in report), report
        assert any("crate::b in a circle: inner, outer" in line for line in report), report
        # The test module's use of `b` and the comment's of `c` are not edges.
        assert not any("c -> b" in line for line in report), report
        assert not any("a -> c" in line for line in report), report
        with open(os.path.join(src, "c.rs"), "w") as f:
            f.write("pub struct Thing;\n")
        with open(os.path.join(src, "b/outer.rs"), "w") as f:
            f.write("pub struct Z;\n")
        assert check(crate) == [], check(crate)
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

#!/usr/bin/env python3
"""The packages one package needs at run time, as Node resolves them in an installed node_modules.

    node_closure.py NODE_MODULES PACKAGE

Prints the top-level package directories (relative to NODE_MODULES, e.g. `zod` or
`@modelcontextprotocol/sdk`) that PACKAGE and its dependencies load, one per line, so an image can
hold one client out of a node_modules that also installed other tools. A dependency is looked up
the way Node does: in the requiring package's own node_modules (copied with it), then at the top.
"""

from __future__ import annotations

import json
import os
import sys


def dependencies(package_dir: str) -> list[str]:
    with open(os.path.join(package_dir, "package.json")) as f:
        manifest = json.load(f)
    names: list[str] = []
    for key in ("dependencies", "optionalDependencies", "peerDependencies"):
        names += list((manifest.get(key) or {}).keys())
    return names


def closure(node_modules: str, package: str) -> list[str]:
    top: set[str] = set()
    seen: set[str] = set()
    pending = [os.path.join(node_modules, package)]
    top.add(package)
    while pending:
        package_dir = pending.pop()
        if package_dir in seen:
            continue
        seen.add(package_dir)
        for name in dependencies(package_dir):
            nested = os.path.join(package_dir, "node_modules", name)
            if os.path.isdir(nested):
                pending.append(nested)
                continue
            hoisted = os.path.join(node_modules, name)
            if os.path.isdir(hoisted):
                top.add(name)
                pending.append(hoisted)
            # Absent: an optional or peer dependency nobody installed, which Node does not load.
    return sorted(top)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    for name in closure(sys.argv[1], sys.argv[2]):
        print(name)

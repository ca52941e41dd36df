#!/usr/bin/env python3
"""Packs files into a one-layer container image in `docker save` format (manifest.json, a
config JSON and a layer tar), which `ctr images import` and `docker load` read. No Docker,
no registry: the e2e node imports these (e2e/node.sh import).

    image.py --out IMAGE.tar --tag NAME:TAG [--user UID:GID] [--entrypoint JSON] [--cmd JSON]
             [--expose 8080/tcp] [--env K=V] [--dir /tmp:1777] --file SRC:DEST[:MODE] ...
             [--tree SRCDIR:DESTDIR] ...

A --tree is copied whole: its files with their modes, its symbolic links as links (a package's
`node_modules/.bin` entries), nothing else.

The layer is reproducible: entries sorted, owned by root, mtime 0. Prints the image's tag
(e2e/image.sh names the operator image after the layer's digest, so new content is a new tag).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def parse_mode(text: str) -> int:
    return int(text, 8)


def tree_entries(src: str, dest: str) -> tuple[list[tuple[str, str, int]], list[tuple[str, str]]]:
    """The files (source, destination, mode) and symbolic links (destination, target) under `src`."""
    files, links = [], []
    for root, dirnames, filenames in os.walk(src):
        dirnames.sort()
        rel = os.path.relpath(root, src)
        for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            target = os.path.normpath(os.path.join(dest, rel, name))
            if os.path.islink(path):
                links.append((target, os.readlink(path)))
            elif os.path.isfile(path):
                files.append((path, target, os.stat(path).st_mode & 0o777))
    return files, links


def layer_bytes(files: list[tuple[str, str, int]], dirs: list[tuple[str, int]],
                links: list[tuple[str, str]] = ()) -> bytes:
    """A tar of `files` (source, destination, mode), `dirs` (path, mode) and `links` (path,
    target), parents included."""
    entries: dict[str, tuple[str, int, str | None]] = {}

    def add_parents(dest: str) -> None:
        parts = dest.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            path = "/".join(parts[:i])
            entries.setdefault(path, ("dir", 0o755, None))

    for path, mode in dirs:
        add_parents(path)
        entries[path.strip("/")] = ("dir", mode, None)
    for src, dest, mode in files:
        add_parents(dest)
        entries[dest.strip("/")] = ("file", mode, src)
    for dest, target in links:
        add_parents(dest)
        entries[dest.strip("/")] = ("link", 0o777, target)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            kind, mode, src = entries[name]
            info = tarfile.TarInfo(name)
            info.mode = mode
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = src
                tar.addfile(info)
            else:
                with open(src, "rb") as f:
                    data = f.read()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--tag", required=True, help="repository:tag the image is imported as; {layer} in it "
                   "becomes the first 12 hex digits of the layer's digest")
    p.add_argument("--user", default="")
    p.add_argument("--entrypoint", default="null", help="JSON array")
    p.add_argument("--cmd", default="null", help="JSON array")
    p.add_argument("--expose", action="append", default=[], help="PORT/PROTO")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE")
    p.add_argument("--workdir", default="/")
    p.add_argument("--dir", action="append", default=[], help="PATH[:MODE] of an empty directory")
    p.add_argument("--file", action="append", default=[], help="SRC:DEST[:MODE]")
    p.add_argument("--tree", action="append", default=[], help="SRCDIR:DESTDIR, copied whole")
    args = p.parse_args()

    files = []
    for spec in args.file:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            p.error(f"--file {spec}: want SRC:DEST[:MODE]")
        src, dest = parts[0], parts[1]
        if not os.path.isfile(src):
            p.error(f"--file {spec}: {src} is not a file")
        mode = parse_mode(parts[2]) if len(parts) == 3 else (os.stat(src).st_mode & 0o777)
        files.append((src, dest, mode))
    links = []
    for spec in args.tree:
        src, sep, dest = spec.partition(":")
        if not sep or not os.path.isdir(src):
            p.error(f"--tree {spec}: want SRCDIR:DESTDIR with SRCDIR a directory")
        tree_files, tree_links = tree_entries(src, dest)
        files += tree_files
        links += tree_links
    dirs = []
    for spec in args.dir:
        path, _, mode = spec.partition(":")
        dirs.append((path, parse_mode(mode) if mode else 0o755))

    entrypoint = json.loads(args.entrypoint)
    cmd = json.loads(args.cmd)
    for name, value in (("--entrypoint", entrypoint), ("--cmd", cmd)):
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            p.error(f"{name} must be a JSON array of strings (exec form)")

    layer = layer_bytes(files, dirs, links)
    layer_digest = hashlib.sha256(layer).hexdigest()
    tag = args.tag.replace("{layer}", layer_digest[:12])

    container_config: dict = {
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *args.env],
        "Entrypoint": entrypoint,
        "Cmd": cmd,
        "WorkingDir": args.workdir,
    }
    if args.user:
        container_config["User"] = args.user
    if args.expose:
        container_config["ExposedPorts"] = {port if "/" in port else f"{port}/tcp": {} for port in args.expose}
    config = {
        "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine),
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": container_config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "e2e/image.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [f"{layer_digest}/layer.tar"]}]

    tmp = args.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as out:
        for name, data in (
            (f"{layer_digest}/layer.tar", layer),
            (config_name, config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            out.addfile(info, io.BytesIO(data))
    os.replace(tmp, args.out)
    print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks that README.md and docs/*.md render as meant and link only inside the repository.

Each file is parsed with markdown-it-py (CommonMark plus GitHub's tables, Debian's
python3-markdown-it, installed by scripts/setup.sh), and then:

1. table: every row of every table has the header's cell count and sits on one line that starts
   and ends with `|` (a row broken across two lines renders as a stray row);
2. link: every relative link or image names a file or folder inside the repository, never
   reached through `..` from outside it, and an anchor names a heading of its target (GitHub's
   heading ids);
3. host: no URL of a package registry or package host (a user of the docs needs none of them).

Usage: scripts/check_docs.py [--root ROOT] [FILE...]
  ROOT: the repository (default: this script's parent); FILE: the files to check, relative to
  ROOT (default: README.md and docs/*.md).
Prints one line per problem, `path:line: rule: what`, and exits 1 if there is any.
"""
import argparse
import os
import pathlib
import re
import sys
import urllib.parse

SYSTEM_PYTHON = "/usr/bin/python3"
try:
    from markdown_it import MarkdownIt
except ImportError:
    # A Python of one's own (pyenv, a venv) may shadow the one apt installs into.
    if os.path.exists(SYSTEM_PYTHON) and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON):
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, *sys.argv])
    sys.exit("check_docs: needs markdown-it-py: apt-get install python3-markdown-it (scripts/setup.sh does)")

# Registries and package hosts: links to them go stale or invite installing what setup.sh does not.
PACKAGE_HOSTS = (
    "pypi.org", "pypi.python.org", "files.pythonhosted.org", "download.pytorch.org", "npmjs.com",
    "npmjs.org", "crates.io", "proxy.golang.org", "pkg.go.dev", "rubygems.org", "packagist.org",
    "nuget.org", "anaconda.org", "anaconda.com", "repo.maven.apache.org", "search.maven.org",
    "hub.docker.com", "docker.io", "quay.io", "ghcr.io", "deb.debian.org", "packages.debian.org",
    "archive.ubuntu.com", "packages.ubuntu.com", "conda-forge.org",
)
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://([^/\s)>`'\"]+)", re.I)
UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def parser():
    return MarkdownIt("commonmark").enable("table")


def slug(text, seen):
    """GitHub's heading id: lower case, punctuation dropped, spaces to '-', repeats numbered."""
    base = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
    count = seen.get(base, 0)
    seen[base] = count + 1
    return base if count == 0 else f"{base}-{count}"


def plain_text(inline):
    return "".join(child.content for child in inline.children or []
                   if child.type in ("text", "code_inline", "html_inline"))


def anchors(tokens):
    seen, ids = {}, set()
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            ids.add(slug(plain_text(tokens[i + 1]), seen))
    return ids


def cells(line):
    row = line.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return len(UNESCAPED_PIPE.split(row))


def check_tables(rel, tokens, lines, problems):
    for token in tokens:
        if token.type != "table_open":
            continue
        start, end = token.map
        header = cells(lines[start])
        for number in range(start, end):
            if number == start + 1:
                continue  # the delimiter row
            line = lines[number].strip()
            if not (line.startswith("|") and line.endswith("|") and not line.endswith("\\|")):
                problems.append(f"{rel}:{number + 1}: table: row does not start and end with '|' "
                                f"(a row broken across lines?): {line[:60]}")
            elif cells(line) != header:
                problems.append(f"{rel}:{number + 1}: table: {cells(line)} cells, the header has {header}")


def links(tokens):
    for token in tokens:
        for child in token.children or []:
            if child.type == "link_open":
                yield (token.map or [0])[0] + 1, child.attrs.get("href", "")
            elif child.type == "image":
                yield (token.map or [0])[0] + 1, child.attrs.get("src", "")


def check_link(root, path, number, target, heading_ids, problems):
    rel = path.relative_to(root).as_posix()
    parts = urllib.parse.urlsplit(target)
    if parts.scheme or parts.netloc:
        return  # a URL: only its host is checked (check_hosts)
    where = urllib.parse.unquote(parts.path)
    if where.startswith("/"):
        problems.append(f"{rel}:{number}: link: absolute path {target}; link relative to this file")
        return
    dest = (path.parent / where).resolve() if where else path
    try:
        dest.relative_to(root)
    except ValueError:
        problems.append(f"{rel}:{number}: link: {target} leaves the repository (through '..')")
        return
    if not dest.exists():
        problems.append(f"{rel}:{number}: link: {target}: no such file in the repository")
        return
    if parts.fragment and dest.suffix == ".md":
        if parts.fragment not in heading_ids(dest):
            problems.append(f"{rel}:{number}: link: {target}: no heading with id "
                            f"'{parts.fragment}' in {dest.relative_to(root).as_posix()}")


def check_hosts(rel, lines, problems):
    for number, line in enumerate(lines, 1):
        for match in URL.finditer(line):
            host = match.group(1).lower().split(":")[0]
            if any(host == h or host.endswith("." + h) for h in PACKAGE_HOSTS):
                problems.append(f"{rel}:{number}: host: {match.group(0)} is a package registry or host")


def main():
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent)
    args.add_argument("files", nargs="*")
    opts = args.parse_args()
    root = pathlib.Path(opts.root).resolve()
    files = [root / f for f in opts.files] or [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    md = parser()
    cache = {}

    def heading_ids(path):
        if path not in cache:
            cache[path] = anchors(md.parse(path.read_text()))
        return cache[path]

    problems = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        if not path.is_file():
            problems.append(f"{rel}: missing")
            continue
        text = path.read_text()
        lines = text.splitlines()
        tokens = md.parse(text)
        md.render(text)  # whatever the parser accepts must also render
        check_tables(rel, tokens, lines, problems)
        for number, target in links(tokens):
            check_link(root, path.resolve(), number, target, heading_ids, problems)
        check_hosts(rel, lines, problems)
    for p in problems:
        print(p)
    if problems:
        print(f"check_docs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_docs: ok ({len(files)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

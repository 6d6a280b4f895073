"""MkDocs hooks: pages made at build time from the code, so they cannot drift from it.

- ``reference/cli.md``: the command line's reference, from the parser the command line
  itself uses (``follower._cli._parser.build_parser``): every command's help as
  ``follower COMMAND --help`` prints it, and the fault modes from ``follower.testing``.
- the error tree on the Errors page, from ``follower/_errors.py``'s docstring.
- ``code/<path>.md``: the source of each module of ``follower/`` and each example, so
  the pages can link to the code that implements what they describe, and the strict
  build fails when a linked module is moved or removed.
- ``assets/vendor/``: the scripts the theme would otherwise load from a CDN when a page
  is viewed (Mermaid, which draws the diagrams; the shim that runs search from
  ``file://``), fetched once from the npm registry at pinned versions and checked
  against their digests, so the built site reads the same with no network. The strict
  build fails if any page script would still come from the network.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent
# Help is wrapped to this width whatever the terminal that builds the site.
HELP_COLUMNS = "88"
SOURCE_GLOBS = ("follower/**/*.py", "examples/*.py")


class Vendored(NamedTuple):
    """A script from an npm package, served from the site instead of a CDN."""

    package: str
    version: str
    member: str  # its path in the package's tarball
    sha256: str  # of that file: a changed pin must change it too
    site_path: str  # where mkdocs.yml's extra_javascript or extra.polyfills names it


# Material draws a diagram with the global `mermaid` when a page defines one, and fetches
# mermaid@11 from a CDN only when none is defined. The offline plugin's shim runs the
# search worker in an iframe, since a page on file:// may not start a Worker.
VENDORED = (
    Vendored(
        "mermaid",
        "11.17.2",
        "package/dist/mermaid.min.js",
        "581ed7d74bd9048d0e3a91363927d72ef22942d7722546b27f7cc29e35390eb8",
        "assets/vendor/mermaid.min.js",
    ),
    Vendored(
        "iframe-worker",
        "1.0.4",
        "package/shim/index.js",
        "e8e412dbcfea9b7e31b5ffa288d7b6035915e714c542f4176a0cdbe262fc9609",
        "assets/vendor/iframe-worker-shim.js",
    ),
)
# Fetched once, kept with the other build environments (`make clean` removes them).
VENDOR_CACHE = ROOT / ".venvs" / "docs-vendor"


def on_config(config: Any) -> Any:
    """Refuse a page script that would be loaded from the network when a page is viewed."""
    scripts = [*config.extra_javascript, *config.extra.get("polyfills", [])]
    remote = [str(script) for script in scripts if "://" in str(script)]
    if remote:
        raise PluginError(
            f"page scripts from the network: {', '.join(remote)}; the site must read "
            "offline: serve them from the site (VENDORED in tools/docs_hooks.py)"
        )
    named = {str(script) for script in scripts}
    unnamed = [item.site_path for item in VENDORED if item.site_path not in named]
    if unnamed:
        raise PluginError(
            f"{', '.join(unnamed)}: bundled into the site but loaded by no page; name it in "
            "mkdocs.yml (extra_javascript, or extra.polyfills for what must run first)"
        )
    return config


def on_files(files: Files, config: Any) -> Files:
    """Add the generated pages and the bundled scripts to the site's files."""
    for item in VENDORED:
        files.append(File.generated(config, item.site_path, abs_src_path=str(vendored(item))))
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    for path in sorted(p for pattern in SOURCE_GLOBS for p in ROOT.glob(pattern)):
        relative = path.relative_to(ROOT).as_posix()
        files.append(File.generated(config, f"code/{relative}.md", content=source_page(relative)))
    return files


def vendored(item: Vendored) -> Path:
    """The cached copy of ``item``, fetched with ``npm pack`` and checked the first time."""
    cached = VENDOR_CACHE / f"{item.package}-{item.version}" / Path(item.member).name
    if cached.is_file() and sha256(cached.read_bytes()) == item.sha256:
        return cached
    npm = shutil.which("npm")
    spec = f"{item.package}@{item.version}"
    if npm is None:
        raise PluginError(
            f"the site bundles {spec} from the npm registry, and npm is not on PATH: "
            "install Node.js with npm (Debian: apt-get install -y npm)"
        )
    with tempfile.TemporaryDirectory() as scratch:
        packed = subprocess.run(
            [npm, "pack", spec, "--pack-destination", scratch, "--silent"],
            capture_output=True,
            text=True,
            check=False,
        )
        if packed.returncode != 0:
            raise PluginError(f"npm pack {spec} failed: {packed.stderr.strip()}")
        (tarball,) = Path(scratch).glob("*.tgz")
        with tarfile.open(tarball) as archive:
            try:
                member = archive.extractfile(item.member)
            except KeyError:
                member = None
            if member is None:
                raise PluginError(f"{spec} has no file {item.member}")
            content = member.read()
    if sha256(content) != item.sha256:
        raise PluginError(
            f"{spec}'s {item.member} has sha256 {sha256(content)}, not the pinned "
            f"{item.sha256}: a changed pin needs its new digest in VENDORED"
        )
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".partial")
    partial.write_bytes(content)
    partial.replace(cached)
    return cached


def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


ERROR_TREE_MARKER = "<!-- generated: the error tree -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Fill in the parts of hand-written pages that come from the code."""
    if ERROR_TREE_MARKER in markdown:
        markdown = markdown.replace(ERROR_TREE_MARKER, error_tree())
    if page.file.src_uri == "changelog.md":
        markdown = pending_changes(markdown)
    return markdown


def pending_changes(changelog: str) -> str:
    """The changelog with the fragments still in ``changes/`` shown where a release puts them."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("changelog", str(ROOT / "tools" / "changelog"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    fragments, problems = module.read_fragments(ROOT / "changes")
    if problems:
        raise PluginError("changelog fragments: " + "; ".join(problems))
    return str(module.fold(changelog, fragments))


def error_tree() -> str:
    """The error tree drawn in ``follower/_errors.py``'s docstring, as a fenced block."""
    import follower._errors

    doc = follower._errors.__doc__ or ""
    tree = [line[4:] for line in doc.splitlines() if line.startswith("    ")]
    if not tree:
        raise ValueError("follower/_errors.py's docstring draws no error tree")
    return "\n".join(["```text", *tree, "```"])


def cli_reference() -> str:
    """The command line's reference page, in Markdown."""
    from follower._cli._parser import build_parser
    from follower.testing import FAULT_NAMES

    parser = build_parser()
    lines = [
        "# Command line reference",
        "",
        "Generated when the site is built, from the parser `follower` itself runs",
        "([`follower/_cli/_parser.py`](../code/follower/_cli/_parser.py.md)): what you read",
        "here is what `--help` prints. What each command is for, with examples, is in",
        "[Reading a step back](../reading.md) (`tail`), the [tutorials](../tutorials/trio.md)",
        "and the README; exit codes are listed in [Errors](../errors.md#command-line-exit-codes).",
        "",
        "## follower",
        "",
        *help_block(parser),
    ]
    for name, command in subcommands(parser):
        lines += ["", f"## follower {name}", "", *help_block(command)]
    lines += [
        "",
        "## Fault modes",
        "",
        "`--fault` (of `demo` and `agent`) makes the reference agent misbehave. It takes one",
        "of these, as `follower.testing.parse_fault` reads them (see",
        "[Testing your own step runner](../testing.md#fault-modes) for what each does):",
        "",
        *(f"- `{name.strip()}`" for name in FAULT_NAMES.split(",")),
        "",
    ]
    return "\n".join(lines)


def subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Each command's name and parser, in the order the parser lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, command in action.choices.items():
                if id(command) not in seen:  # an alias names the same parser again
                    seen.add(id(command))
                    yield name, command


def help_block(parser: argparse.ArgumentParser) -> list[str]:
    """``parser``'s help, wrapped at a fixed width, as a fenced block."""
    with fixed_columns():
        text = parser.format_help()
    return ["```text", *text.rstrip().splitlines(), "```"]


@contextlib.contextmanager
def fixed_columns() -> Iterator[None]:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def source_page(relative: str) -> str:
    """A page showing one file of the repository, line-numbered."""
    text = (ROOT / relative).read_text(encoding="utf-8")
    fence = "````" if "```" in text else "```"
    return "\n".join(
        [
            "---",
            "search:",
            "  exclude: true",
            "---",
            "",
            f"# {relative}",
            "",
            f'{fence}python linenums="1"',
            text.rstrip("\n"),
            fence,
            "",
        ]
    )

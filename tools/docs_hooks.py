"""MkDocs hooks: the generated parts of the reference pages, so they cannot drift from the code.

- ``<!-- cli-reference -->`` (docs/cli.md) becomes one section per ``veronica-mw`` subcommand, walked
  from the real argparse parser (``veronica_mw.cli.main.build_parser``): usage, every option and
  argument with its metavar, default and help. A flag someone adds appears by itself.
- ``<!-- api-reference -->`` (docs/api.md) becomes one mkdocstrings block per name of
  ``veronica_mw.__all__``, so a new public name is documented from its docstring.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

CLI_MARKER = "<!-- cli-reference -->"
API_MARKER = "<!-- api-reference -->"


def subcommands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("veronica-mw",)
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser below ``parser`` that is a leaf command, with its command path."""
    children = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not children:
        yield path, parser
    for action in children:
        for name, child in action.choices.items():
            yield from subcommands(child, (*path, name))


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return choice.help or ""
    return ""


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _argument(action: argparse.Action) -> tuple[str, str, str, str]:
    if action.option_strings:
        names = ", ".join(f"`{o}`" for o in action.option_strings)
    else:
        names = f"`{action.metavar or action.dest}`"
    takes = action.nargs != 0
    metavar = action.metavar or (action.dest.upper() if takes and action.option_strings else "")
    value = f"`{metavar}`" if takes and metavar and action.option_strings else ""
    if action.nargs == argparse.REMAINDER:
        value = (value + " " if value else "") + "(the rest of the command line)"
    elif action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction):
        value += " (repeatable)" if action.option_strings else "one or more"
    default = action.default
    shown = "" if default in (None, False, [], argparse.SUPPRESS) or not takes else f"`{default}`"
    if action.required and action.option_strings:
        shown = "required"
    described = "" if action.help in (None, argparse.SUPPRESS) else action.help
    return names, value.strip(), shown, _cell(described)


def cli_reference() -> str:
    from veronica_mw.cli.main import build_parser

    root = build_parser()
    out: list[str] = []
    parents: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    for path, parser in subcommands(root):
        parent = root
        for depth in range(2, len(path)):
            parent = parents.setdefault(path[:depth], _child(parent, path[depth - 1]))
        out += [f"### `{' '.join(path)}`", "", _help_of(parent, path[-1]), ""]
        usage = " ".join(parser.format_usage().split())
        out += ["```text", usage.removeprefix("usage: "), "```", ""]
        out += ["| argument | value | default | description |", "|---|---|---|---|"]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            out.append("| " + " | ".join(_argument(action)) + " |")
        out.append("")
    return "\n".join(out)


def _child(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            child: argparse.ArgumentParser = action.choices[name]
            return child
    raise KeyError(name)


def api_reference() -> str:
    import veronica_mw

    return "\n\n".join(f"::: veronica_mw.{name}" for name in sorted(veronica_mw.__all__))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if API_MARKER in markdown:
        markdown = markdown.replace(API_MARKER, api_reference())
    return markdown

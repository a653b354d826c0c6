"""How `rhythm` reads its command line (rhythm_core.cli builds the commands on these): argparse's own
mistakes on one line with exit status 2, an unrecognized flag named with its command and the closest
flag that command has, option help that ends with its default, and the commands other packages add.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib.util
from pathlib import Path


class OneLineParser(argparse.ArgumentParser):
    """argparse's own mistakes (a missing or unknown option, a bad choice) on one line, exit 2; an
    unrecognized argument is reported by the command it was given to, with the closest flag of that
    command: `rhythm baselines: error: unrecognized argument --sedes (did you mean --seeds?); see
    rhythm baselines --help`."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self._command_parser(parsed)
            parser.exit(2, f"{parser.prog}: error: {unrecognized(parser, extras)}; see {parser.prog} --help\n")
        return parsed

    def _command_parser(self, parsed) -> argparse.ArgumentParser:
        """The parser of the (sub)command that was given: extras are left over from its arguments."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
                if isinstance(chosen, OneLineParser):
                    return chosen._command_parser(parsed)
        return self


def _is_flag(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)  # a negative number is a value
    except ValueError:
        return True
    return False


def unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """What `extras` (the arguments `parser` did not recognize) are, each unknown flag with the closest
    option string of `parser` where one is close; a value right after an unknown flag is its value, not
    an argument of its own."""
    options = [s for action in parser._actions for s in action.option_strings]
    named, after_flag = [], False
    for token in extras:
        if _is_flag(token):
            flag = token.split("=", 1)[0]
            close = difflib.get_close_matches(flag, options, n=1, cutoff=0.6)
            named.append(flag + (f" (did you mean {close[0]}?)" if close else ""))
            after_flag = "=" not in token
        elif after_flag:
            after_flag = False
        else:
            named.append(token)
    return f"unrecognized argument{'s' if len(named) > 1 else ''} {', '.join(named)}"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default (none shown for flags and required options)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.required or action.default == argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rhythm")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


# Commands other packages add to `rhythm` (entry-point group "rhythm.commands", name -> a function
# taking the command's arguments and returning an exit code). rhythm_pipeline adds `lineage`, which
# reads the Dagster instance: the core never imports Dagster, and loads a plugin only when its
# command runs.
PLUGIN_GROUP = "rhythm.commands"


def plugin_commands() -> dict:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP)}


def plugin_description(entry_point) -> str:
    """A plugin command's one line in `rhythm --help`, read from its module's source without importing
    it (a plugin may import Dagster, which `rhythm` never loads until the command runs): the module's
    DESCRIPTION string, else the first line of its docstring, else where the command comes from."""
    module = entry_point.value.split(":")[0].strip()
    try:
        tree = ast.parse(_module_file(module).read_text())
    except (OSError, SyntaxError, ValueError, ImportError):
        tree = None
    if tree is not None:
        for node in tree.body:
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DESCRIPTION"
                                                     for t in node.targets)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                return node.value.value.strip()
        docstring = ast.get_docstring(tree)
        if docstring and docstring.strip():
            return docstring.strip().splitlines()[0]
    return f"from {module} ({entry_point.name} --help)"


def _module_file(module: str) -> Path:
    """The source file of `module`, found without importing it or its packages."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)  # a top-level name: nothing is imported
    if spec is None:
        raise ImportError(f"no module named {top!r}")
    if not rest:
        return Path(spec.origin)
    locations = list(spec.submodule_search_locations or [])
    if not locations:
        raise ImportError(f"{top} is not a package")
    folder = Path(locations[0])
    for part in rest[:-1]:
        folder = folder / part
    for candidate in (folder / f"{rest[-1]}.py", folder / rest[-1] / "__init__.py"):
        if candidate.is_file():
            return candidate
    raise ImportError(f"no source file for {module}")

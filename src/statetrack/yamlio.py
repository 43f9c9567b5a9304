"""The one YAML reader for specs and overrides: strict where plain YAML is lenient.

Plain `yaml.safe_load` lets a second `train:` block silently replace the first, expands an alias
bomb (a few lines that name a list of lists a billion entries long) until the machine runs out of
memory, recurses until Python's stack overflows on deeply nested input, and returns values a spec
cannot hold (bytes, sets, dates). `load` refuses each of these with a one-line `StatetrackError`
that names what and where:
- a key given twice in one mapping (the key and both lines);
- more than `MAX_NODES` values once aliases are expanded (a spec has a few hundred);
- nesting deeper than `MAX_DEPTH`;
- a value of a type JSON has no form for (`!!binary`, `!!set`, `!!timestamp`, ...).
Timestamps are read as the strings they are written as, so `description: 2025-01-01` stays text.
"""

from __future__ import annotations

from typing import Any

import yaml

from statetrack.errors import StatetrackError

MAX_NODES = 100_000
MAX_DEPTH = 64

_PLAIN = (str, int, float, bool, type(None))


class _Loader(yaml.SafeLoader):
    """Safe loading without the implicit timestamp type, refusing duplicate keys."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    raise StatetrackError(
                        f"line {key_node.start_mark.line + 1}: a mapping key must be a "
                        "plain value, not a list or mapping"
                    ) from None
                line = key_node.start_mark.line + 1
                if key in first:
                    raise StatetrackError(
                        f"key {key!r} is given twice in one mapping (lines {first[key]} and {line}); keep one"
                    )
                first[key] = line
        return super().construct_mapping(node, deep=deep)


# the YAML 1.1 timestamp resolver turns `2025-01-01` into a date, which no spec value can be
_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _check_graph(root: yaml.Node) -> None:
    """Refuse a node graph whose expansion (aliases followed) is larger than MAX_NODES or deeper than
    MAX_DEPTH; sizes are counted once per distinct node, so the check itself is linear."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise StatetrackError(f"line {node.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep")
        if id(node) in sizes:
            return sizes[id(node)]
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(key, depth + 1) + size(value, depth + 1) for key, value in node.value)
        else:
            total = 1
        if total > MAX_NODES:
            raise StatetrackError(
                f"line {node.start_mark.line + 1}: expands to more than {MAX_NODES:,} values "
                "(aliases of aliases); write the values out"
            )
        sizes[id(node)] = total
        return total

    size(root, 0)


def _check_values(value: object, where: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, _PLAIN):
                raise StatetrackError(f"{where or 'the top level'}: key of type {type(key).__name__} is not allowed")
            _check_values(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_values(item, f"{where}[{index}]")
    elif not isinstance(value, _PLAIN):
        raise StatetrackError(
            f"{where or 'the value'}: a YAML {type(value).__name__} value is not allowed here; "
            "expected text, a number, true/false, a list or a mapping"
        )


def load(text: str) -> Any:  # a parsed document: a mapping, list, scalar or None
    """Parse one YAML document strictly (see the module docstring); raises StatetrackError."""
    try:
        loader = _Loader(text)  # reads the first characters: a control character is refused here
    except yaml.YAMLError as error:
        raise StatetrackError(_one_line(error)) from None
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise StatetrackError(f"nested more than {MAX_DEPTH} levels deep") from None
        if node is None:
            return None
        _check_graph(node)
        value = loader.construct_document(node)
    except yaml.YAMLError as error:
        raise StatetrackError(_one_line(error)) from None
    except ValueError as error:  # an integer beyond Python's digit limit
        if isinstance(error, StatetrackError):
            raise
        raise StatetrackError(str(error).splitlines()[0].split(";")[0]) from None
    finally:
        loader.dispose()
    _check_values(value, "")
    return value


def _one_line(error: yaml.YAMLError) -> str:
    """A YAML error in one line: what went wrong and where, without the quoted source excerpt."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        problem = ": ".join(filter(None, (error.context, error.problem))) or "malformed YAML"
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        return f"{where}{problem}"
    return str(error).splitlines()[0] if str(error) else type(error).__name__

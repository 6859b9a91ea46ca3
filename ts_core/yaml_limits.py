"""YAML read with limits: a damaged or hostile file (an alias bomb, a cycle, deep nesting, a huge file)
is refused in one line before it is built, never expanded into memory.

PyYAML's safe loader builds no objects but shares one object per anchor; anything that walks the
result (pydantic, json.dumps, `ts sql`'s configs view) expands every alias, so a 466-byte file of
nested aliases becomes gigabytes. Here the node graph is composed first (linear in the text), its
size with every alias expanded is counted (each node once, memoised), and only a graph within the
limits is constructed. No pydantic here: `ts sql` reads configs without importing it.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["MAX_YAML_BYTES", "MAX_YAML_CHARS", "MAX_YAML_NODES", "YamlLimitError", "load_bounded", "read_bounded"]

MAX_YAML_BYTES = 1 << 20  # a run's config.yaml is ~5 KB, a preset less
MAX_YAML_NODES = 100_000  # nodes of the document with every alias expanded
MAX_YAML_CHARS = 4 << 20  # characters of its scalars, aliases expanded


class YamlLimitError(ValueError):
    """A YAML text over the limits, or not YAML at all; the message says which (one line)."""


def read_bounded(path: Any, loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> Any:
    """The YAML document in file `path`, read only if it is at most MAX_YAML_BYTES (YamlLimitError)."""
    import errno
    import os
    import stat
    from pathlib import Path

    path = Path(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not wait for a writer
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):  # said before open(fd) would, naming the descriptor instead of the path
        os.close(fd)
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    with open(fd, "rb") as f:
        if not stat.S_ISREG(st.st_mode):
            raise YamlLimitError("is not a regular file (a FIFO, device or socket); it is not read")
        if st.st_size > MAX_YAML_BYTES:
            raise YamlLimitError(f"is {st.st_size} bytes, more than the {MAX_YAML_BYTES} a config may have")
        raw = f.read(MAX_YAML_BYTES + 1)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlLimitError(f"is not UTF-8 text ({e.reason} at byte {e.start})") from None
    return load_bounded(text, loader)


def load_bounded(text: str, loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> Any:
    """yaml.load(text, loader) within the limits above; YamlLimitError (one line) otherwise. A syntax
    error is still yaml.YAMLError."""
    if len(text) > MAX_YAML_BYTES:
        raise YamlLimitError(f"is {len(text)} characters, more than the {MAX_YAML_BYTES} a config may have")
    ld = _depth_limited(loader)(text)
    try:
        try:
            node = ld.get_single_node()
        except RecursionError:
            raise YamlLimitError("nests too deeply") from None
        if node is None:
            return None
        _check_size(node)
        return ld.construct_document(node)
    finally:
        ld.dispose()


MAX_YAML_DEPTH = 100
_LIMITED: dict[type, type] = {}


def _depth_limited(loader: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """`loader` composing at most MAX_YAML_DEPTH nested nodes (Python's recursion limit would take
    seconds to reach, and its RecursionError as long to unwind)."""
    if loader not in _LIMITED:

        class Limited(loader):  # type: ignore[misc, valid-type]
            _depth = 0

            def compose_node(self, parent: Any, index: Any) -> Any:
                self._depth += 1
                if self._depth > MAX_YAML_DEPTH:
                    raise YamlLimitError(f"nests more than {MAX_YAML_DEPTH} levels deep")
                try:
                    return super().compose_node(parent, index)
                finally:
                    self._depth -= 1

        _LIMITED[loader] = Limited
    return _LIMITED[loader]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_size(root: yaml.Node) -> None:
    """Count the document with every alias expanded (nodes and scalar characters), without expanding it:
    each distinct node once, bottom-up; a node that is its own ancestor (a cycle) is refused."""
    memo: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            kids = [memo[id(c)] for c in _children(node)]
            own = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            nodes, chars = 1 + sum(k[0] for k in kids), own + sum(k[1] for k in kids)
            if nodes > MAX_YAML_NODES or chars > MAX_YAML_CHARS:
                raise YamlLimitError(
                    f"expands to more than {MAX_YAML_NODES} values or {MAX_YAML_CHARS} characters "
                    "(nested aliases: a YAML bomb?)"
                )
            memo[key] = (nodes, chars)
            continue
        if key in memo:
            continue
        if key in on_path:
            raise YamlLimitError("holds an alias to itself (a cycle)")
        if len(on_path) > MAX_YAML_DEPTH:
            raise YamlLimitError(f"nests more than {MAX_YAML_DEPTH} levels deep")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in memo)

"""The ``{{…}}`` reference protocol and its resolution rules.

=================  ==========================================================
``{{type.name}}``  qualified: ``name`` in namespace ``type``; a fresh instance
``{{%type.name%}}`` qualified; reuse the instance if one was already built
``{{name}}``       unqualified: must name exactly one entity across namespaces
``{{%name%}}``     unqualified; reuse
``{{#id#}}``       a system id (e.g. a profile's ``profile_id``); reuse
anything else      a literal (``{{}}`` too)
=================  ==========================================================

Reference fields also accept a plain name (``provider = "fast"``), resolved like ``{{name}}``
but only in the field's own namespace. An unqualified reference found in more than one
namespace is an error that lists them and shows the qualified spelling.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ._source import ConfigSource

__all__ = ["NAMESPACES", "Namespaces", "Reference", "parse_reference"]

NAMESPACES = (
    "agent_profile",
    "provider",
    "sub_agent",
    "compaction",
    "system_prompt",
    "system_prompt_strategy",
)

_REF = re.compile(r"^\{\{(.+)\}\}$", re.DOTALL)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Reference:
    raw: str
    name: str
    namespace: str | None = None
    recreate: bool = True
    system_id: bool = False

    @property
    def effective_name(self) -> str:
        return self.name

    @property
    def qualified(self) -> bool:
        return self.namespace is not None


def parse_reference(text: str) -> Reference | None:
    """The reference ``text`` spells, or None when it is a literal."""
    match = _REF.match(text.strip())
    if match is None:
        return None
    inner = match.group(1).strip()
    if len(inner) >= 3 and inner.startswith("#") and inner.endswith("#"):
        return Reference(raw=text, name=inner[1:-1], recreate=False, system_id=True)
    recreate = True
    if len(inner) >= 3 and inner.startswith("%") and inner.endswith("%"):
        inner, recreate = inner[1:-1], False
    if not inner or any(c in inner for c in "{}%#"):
        return None
    namespace, dot, rest = inner.partition(".")
    if dot and namespace in NAMESPACES and rest:
        return Reference(raw=text, name=rest, namespace=namespace, recreate=recreate)
    return Reference(raw=text, name=inner, recreate=recreate)


@dataclass
class _Entry(Generic[T]):
    value: T
    path: tuple[str | int, ...]
    system_id: str | None = None


@dataclass
class Namespaces:
    """Every declared entity by namespace and name, plus a cache for ``%`` (reuse) references."""

    source: ConfigSource
    entries: dict[str, dict[str, _Entry[Any]]] = field(default_factory=dict)
    built: dict[tuple[str, str], Any] = field(default_factory=dict)

    def declare(
        self,
        namespace: str,
        declared: str,
        value: Any,
        path: Sequence[str | int],
        *,
        system_id: str | None = None,
    ) -> None:
        ref = parse_reference(declared)
        if ref is not None and ref.namespace not in (None, namespace):
            raise self.source.error(
                f"declares {declared!r} in namespace `{ref.namespace}`, but this section "
                f"holds `{namespace}` entries; write {{{{{namespace}.{ref.name}}}}} or "
                f"{{{{{ref.name}}}}}.",
                path,
            )
        name = ref.name if ref is not None else declared
        table = self.entries.setdefault(namespace, {})
        if name in table:
            first = self.source.line_of(table[name].path)
            where = f" (first declared at line {first})" if first else ""
            raise self.source.error(
                f"{namespace} {name!r} is declared twice{where}; ids must be unique.", path
            )
        table[name] = _Entry(value, tuple(path), system_id)

    def names(self, namespace: str) -> list[str]:
        return list(self.entries.get(namespace, {}))

    def resolve(
        self, text: str, namespace: str, path: Sequence[str | int]
    ) -> tuple[str, Any, Reference]:
        """Find what ``text`` refers to in ``namespace``: ``(name, entity, reference)``."""
        ref = parse_reference(text)
        if ref is None:  # a plain name: only this field's namespace
            ref = Reference(raw=text, name=text.strip())
        if ref.system_id:
            for namespace_name, table in self.entries.items():
                for name, entry in table.items():
                    if entry.system_id == ref.name:
                        if namespace_name != namespace:
                            raise self.source.error(
                                f"{text!r} is the system id of {namespace_name} {name!r}, but "
                                f"this field expects a `{namespace}` entry.",
                                path,
                            )
                        return name, entry.value, ref
            raise self.source.error(f"no entity has the system id {ref.name!r}.", path)
        if ref.namespace is not None and ref.namespace != namespace:
            raise self.source.error(
                f"{text!r} refers to namespace `{ref.namespace}`, but this field expects a "
                f"`{namespace}` entry.",
                path,
            )
        if ref.namespace is None and _REF.match(text.strip()):
            homes = [ns for ns, table in self.entries.items() if ref.name in table]
            if len(homes) > 1:
                options = " or ".join(f"{{{{{ns}.{ref.name}}}}}" for ns in homes)
                raise self.source.error(
                    f"{text!r} is ambiguous: {ref.name!r} exists in namespaces "
                    f"{', '.join(homes)}; write {options}.",
                    path,
                )
            if homes and homes[0] != namespace:
                raise self.source.error(
                    f"{text!r} names a `{homes[0]}` entry, but this field expects a "
                    f"`{namespace}` entry.",
                    path,
                )
        table = self.entries.get(namespace, {})
        found = table.get(ref.name)
        if found is None:
            known = list(table)
            close = difflib.get_close_matches(ref.name, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            listing = ", ".join(repr(k) for k in known) or "none are declared"
            raise self.source.error(
                f"{text!r} does not name a `{namespace}` entry.{hint} Known: {listing}.", path
            )
        return ref.name, found.value, ref

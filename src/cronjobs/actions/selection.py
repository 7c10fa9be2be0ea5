"""Which rows a bulk operation is about (`Selection`), and its canonical key.

A selection is either ticked rows (`ids`) or a filter: the Queue page's (status, types of
a type or a task, parent, text in the title, housekeeping types left out) or the Failed
page's (a type, a group: type and fingerprint, named by its pattern). Two selections with
the same key are the same selection, whoever made them and in whatever order: ids are
sorted and made unique, types and hidden types sorted, a task becomes its types, empty
text is no filter. One operation runs per key at a time (`cronjobs.actions.bulk`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from .. import store
from ..job import failures

_WORD = re.compile(r"[\w.*:/-]+")


def _word(text: str) -> str:
    """`text` as it is when it is one plain word, else JSON-quoted (no key collides)."""
    return text if _WORD.fullmatch(text) else json.dumps(text, ensure_ascii=False)


@dataclass(frozen=True)
class Selection:
    """The rows an operation is about. Normalised when made (see the module's rules).

    Attributes:
        status: rows in this status only (None: any status the action works on).
        job_type: rows of this type (one type; `types` for several).
        group: rows of this Failed-page group, named by its pattern
            (`cronjobs.job.failures.pattern`: `account <n>: API answered <n>`): their
            stored fingerprint is its hash.
        unmarked: with `group`: error keys (first 200 characters) of its rows that have
            no stored fingerprint (see `store.views.failure_group`); not in the key.
        types: rows of any of these types (a task's types).
        parent: children of this row only.
        title: rows whose title contains this text.
        hide: types left out (`a.b.execute`, or a prefix `http.uptime.*`).
        ids: these rows only (ticked on a page); a selection of ids takes no filter.
        queue: rows of this queue only.
        root: rows under this family root only (children, grandchildren: `root_id`; the
            family page's Retry failed).

    Raises:
        ValueError: ids together with a filter.
    """

    status: str | None = None
    job_type: str | None = None
    group: str | None = None
    unmarked: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    parent: int | None = None
    title: str | None = None
    hide: tuple[str, ...] = ()
    ids: tuple[int, ...] = ()
    root: int | None = None
    queue: str | None = None

    def __post_init__(self) -> None:
        types = sorted({t for t in (*self.types, self.job_type or "") if t})
        one = len(types) == 1
        fix = object.__setattr__
        fix(self, "job_type", types[0] if one else None)
        fix(self, "types", () if one else tuple(types))
        fix(self, "title", (self.title or "").strip() or None)
        fix(self, "hide", tuple(sorted(set(self.hide))))
        fix(self, "ids", tuple(sorted({int(i) for i in self.ids})))
        fix(self, "unmarked", tuple(sorted(set(self.unmarked))) if self.group is not None
            else ())
        if self.ids and (self.key_parts() or self.status is not None):
            raise ValueError("a selection is either ticked ids or a filter, not both")

    def all_types(self) -> tuple[str, ...]:
        """The types of the selection (empty: any type)."""
        return (self.job_type,) if self.job_type else self.types

    def key_parts(self) -> list[str]:
        """The filter's parts of the key after the status (empty for ids or no filter)."""
        parts = []
        if self.all_types():
            parts.append("type=" + ",".join(_word(t) for t in self.all_types()))
        if self.parent is not None:
            parts.append(f"parent={self.parent}")
        if self.title:
            parts.append("title=" + json.dumps(self.title, ensure_ascii=False))
        if self.hide:
            parts.append("not=" + ",".join(_word(t) for t in self.hide))
        if self.group is not None:
            parts.append("group=" + json.dumps(self.group, ensure_ascii=False))
        if self.root is not None:
            parts.append(f"root={self.root}")
        if self.queue is not None:
            parts.append(f"queue={_word(self.queue)}")
        return parts

    def key(self) -> str:
        """The canonical string of this selection, on one line: `ids=3,5,9`, or the status
        (`any` for none) and the filter (`failed type=x group="HTTP <n>"`)."""
        if self.ids:
            return "ids=" + ",".join(map(str, self.ids))
        return " ".join([self.status or "any", *self.key_parts()])

    def running_key(self) -> str:
        """The value of the unique `running_key` while an operation of it runs."""
        return hashlib.sha256(self.key().encode()).hexdigest()

    def rows(self, statuses: tuple[str, ...]) -> store.selection.Where:
        """Its rows among those in `statuses` (the action's), as SQL: the selection's own
        status narrows them (a status outside them: no row)."""
        if self.status is not None:
            statuses = tuple(s for s in statuses if s == self.status)
        failure = (None if self.group is None
                   else (failures.digest(self.group), self.unmarked))
        return store.selection.where(
            statuses=statuses, types=self.all_types(), failure=failure, parent=self.parent,
            title=self.title, hide=self.hide, ids=self.ids, root=self.root,
            queue=self.queue)

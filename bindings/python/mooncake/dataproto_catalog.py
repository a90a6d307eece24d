# SPDX-License-Identifier: Apache-2.0
"""A catalog of logical rows stored as DataProto fragments.

A trainer often writes a batch once (one DataProto stage, one row per
sample) and later wants the rows of given samples by a logical key, maybe
with fields that arrived in other writes.  :class:`DataProtoCatalog` keeps
that map in memory, as upstream's ``mooncake.dataproto_catalog``::

    partition -> logical key -> {tags, field -> (fragment id, row)}

A *fragment* is one stored DataProto stage, named by its manifest key and
kept as its exported handle (``structured_object_store.export_dataproto_ref``),
so :meth:`DataProtoCatalog.resolve` returns what a reader needs: for each
group of fields that live together, the (fragment, row) of every key, and
the handles to read them with ``MooncakeBundleTransfer.get(handle,
rows=[...])``.  Metadata only: nothing here touches a store.  Not
thread-safe (guard it with a lock when shared).

May import: structured_object_store (and, through it, the store).
"""

import copy
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from mooncake.structured_object_store import export_dataproto_ref, import_dataproto_ref

__all__ = ["DataProtoCatalog"]


def _check_partition(partition: Any) -> str:
    if not isinstance(partition, str) or not partition:
        raise ValueError("partition must be a non-empty string")
    return partition


def _check_names(what: str, names: Any) -> List[str]:
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise ValueError(f"{what} must be a sequence of non-empty strings")
    names = list(names)
    if not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{what} must be non-empty strings")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} must be unique")
    return names


class _Entry:
    """One logical key: its tags and where each of its fields lives."""

    __slots__ = ("tags", "fields")

    def __init__(self) -> None:
        self.tags: Dict[str, Any] = {}
        self.fields: Dict[str, Tuple[str, int]] = {}


class DataProtoCatalog:
    """Logical keys -> rows of stored DataProto fragments (see the module
    docstring).  Every method validates all of its arguments before it
    changes anything."""

    def __init__(self) -> None:
        self._partitions: Dict[str, Dict[str, _Entry]] = {}
        # fragment id -> [normalised handle, number of (key, field) locations]
        self._fragments: Dict[str, List[Any]] = {}

    # ---- writes -----------------------------------------------------------------

    def update(self, partition: str, keys: Sequence[str], *,
               tags: Optional[Sequence[Mapping[str, Any]]] = None,
               handle: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """Merge ``tags`` (one mapping per key) into the keys' tags, and/or
        record that row ``r`` of the one-stage DataProto ``handle`` holds
        the fields of ``keys[r]``.

        Returns ``{"keys", "tags" (copies of the merged tags), "fields"
        (the union of the keys' fields, first seen first)}``.
        """
        _check_partition(partition)
        keys = _check_names("keys", keys)
        if tags is None and handle is None:
            raise ValueError("catalog update requires tags or a DataProto handle")
        if tags is not None:
            if isinstance(tags, Mapping) or not isinstance(tags, Sequence) or \
                    len(tags) != len(keys):
                raise ValueError("tags must have the same length as keys")
            for t in tags:
                if not isinstance(t, Mapping):
                    raise TypeError("tags must be mappings")
        fragment = None
        if handle is not None:
            fragment = self._fragment_of(handle, len(keys))
        part = self._partitions.setdefault(partition, {})
        if fragment is not None:
            fid, normal = fragment
            if fid not in self._fragments:
                self._fragments[fid] = [normal, 0]
        for r, key in enumerate(keys):
            entry = part.get(key)
            if entry is None:
                entry = part[key] = _Entry()
            if tags is not None:
                entry.tags.update(copy.deepcopy(dict(tags[r])))
            if fragment is not None:
                for f in fragment[1]["field_index"]:
                    self._place(entry, f, (fragment[0], r))
        if fragment is not None and self._fragments[fragment[0]][1] == 0:
            del self._fragments[fragment[0]]
        return {"keys": list(keys), "tags": [copy.deepcopy(part[k].tags) for k in keys],
                "fields": self._union_fields(part, keys)}

    def _fragment_of(self, handle: Mapping[str, Any], nkeys: int) -> Tuple[str, Dict[str, Any]]:
        normal = export_dataproto_ref(import_dataproto_ref(handle))
        if normal["batch_size"] != nkeys:
            raise ValueError(f"DataProto batch size {normal['batch_size']} does not match "
                             f"{nkeys} logical keys")
        stages = normal["stage_refs"]
        if not stages or not normal["field_index"]:
            raise ValueError("DataProto catalog fragments cannot be empty")
        if len(stages) != 1:
            raise ValueError("catalog fragments must contain exactly one DataProto stage")
        fid = next(iter(stages.values()))["manifest_key"]
        known = self._fragments.get(fid)
        if known is not None and known[0] != normal:
            raise ValueError(f"DataProto fragment id collision: {fid!r}")
        return fid, normal

    def _place(self, entry: _Entry, field: str, loc: Tuple[str, int]) -> None:
        old = entry.fields.get(field)
        if old == loc:
            return
        entry.fields[field] = loc
        self._fragments[loc[0]][1] += 1
        if old is not None:
            self._drop_ref(old[0])

    def _drop_ref(self, fid: str) -> None:
        frag = self._fragments.get(fid)
        if frag is None:
            return
        frag[1] -= 1
        if frag[1] <= 0:
            del self._fragments[fid]

    @staticmethod
    def _union_fields(part: Mapping[str, _Entry], keys: Sequence[str]) -> List[str]:
        seen: Dict[str, None] = {}
        for k in keys:
            for f in part[k].fields:
                seen.setdefault(f, None)
        return list(seen)

    def remove(self, partition: str, keys: Sequence[str]) -> None:
        """Forget ``keys`` (unknown ones are ignored) and their fragment
        references; a partition left empty is dropped."""
        _check_partition(partition)
        keys = _check_names("keys", keys)
        part = self._partitions.get(partition)
        if part is None:
            return
        for k in keys:
            entry = part.pop(k, None)
            if entry is not None:
                for fid, _ in entry.fields.values():
                    self._drop_ref(fid)
        if not part:
            del self._partitions[partition]

    # ---- reads ---------------------------------------------------------------------

    def resolve(self, partition: str, keys: Sequence[str],
                fields: Optional[Sequence[str]] = None) -> Dict[str, Any]:
        """Where the ``fields`` (default: every field of the keys) of
        ``keys`` live: ``{"keys", "tags", "fields", "field_groups":
        [{"fields", "locations": [(fragment id, row) per key]}], "handles":
        {fragment id: handle}}``; fields whose locations are the same for
        every key share a group."""
        _check_partition(partition)
        keys = _check_names("keys", keys)
        if fields is not None:
            fields = _check_names("field names", fields)
        part = self._partitions.get(partition, {})
        missing = [k for k in keys if k not in part]
        if missing:
            raise ValueError(f"keys were not found in partition {partition!r}: {missing}")
        names = list(fields) if fields is not None else self._union_fields(part, keys)
        if not names:
            raise ValueError("requested keys do not contain any fields")
        for k in keys:
            absent = [f for f in names if f not in part[k].fields]
            if absent:
                raise ValueError(f"fields are not ready for key {k!r}: {absent}")
        groups: Dict[Tuple[Tuple[str, int], ...], List[str]] = {}
        for f in names:
            locs = tuple(part[k].fields[f] for k in keys)
            groups.setdefault(locs, []).append(f)
        handles: Dict[str, Any] = {}
        for locs in groups:
            for fid, _ in locs:
                if fid not in handles:
                    handles[fid] = copy.deepcopy(self._fragments[fid][0])
        return {"keys": list(keys), "tags": [copy.deepcopy(part[k].tags) for k in keys],
                "fields": names,
                "field_groups": [{"fields": fs, "locations": list(locs)}
                                 for locs, fs in groups.items()],
                "handles": handles}

    def list(self, partition: Optional[str] = None) -> Dict[str, Dict[str, Dict[str, Any]]]:
        """``{partition: {key: tags}}`` (copies); one partition when named,
        ``{}`` for an unknown one."""
        if partition is not None:
            _check_partition(partition)
            part = self._partitions.get(partition)
            if part is None:
                return {}
            return {partition: {k: copy.deepcopy(e.tags) for k, e in part.items()}}
        return {p: {k: copy.deepcopy(e.tags) for k, e in part.items()}
                for p, part in self._partitions.items()}

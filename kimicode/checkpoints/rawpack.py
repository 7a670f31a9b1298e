"""Writing git's on-disk formats directly, for the first checkpoint of a large workspace.

Running git on 10,000 new files costs seconds: `git add` writes one loose object file per blob,
`fast-import` hashes with the slow collision-detecting SHA-1 and compresses, and the index then needs
`update-index --refresh` to stat every file again. Here one pass over the files stats each one, reads
it, hashes it (OpenSSL SHA-1) and appends it to a single pack; the trees are built from the same
list, and the index is written from the stat results already taken. Formats written:

- pack v2 and its index v2 (`Documentation/gitformat-pack.txt`), objects stored whole (no deltas),
  compressed only up to a budget (see `PackWriter`);
- index v2 with a `TREE` (cache tree) extension (`Documentation/gitformat-index.txt`), so the next
  `git write-tree` reuses the trees instead of hashing them again.

The result is checked by the tests against trees git builds itself, and by `git fsck --strict`.
Racy timestamps need nothing special: git treats an entry whose mtime is not older than the index
file as possibly changed and compares its content, as it does for an index it wrote itself.
"""

from __future__ import annotations

import hashlib
import os
import stat as statmod
import struct
import tempfile
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kimicode.safeio import private_write

OBJ_COMMIT, OBJ_TREE, OBJ_BLOB = 1, 2, 3
COMPRESS_BYTES = 16 << 20
"""Bytes of objects a pack compresses before it stores the rest plain (see `PackWriter`)."""
_TYPE_NAMES = {OBJ_COMMIT: b"commit", OBJ_TREE: b"tree", OBJ_BLOB: b"blob"}


@dataclass(frozen=True, slots=True)
class Entry:
    """One file as stored: its path (bytes), git mode, blob id and its index entry's fixed part (the stat
    data taken before reading, packed: 62 bytes instead of a `stat_result` per file of the tree)."""

    path: bytes
    mode: int
    sha: bytes
    head: bytes

    @classmethod
    def of(cls, path: bytes, mode: int, sha: bytes, st: os.stat_result) -> Entry:
        m = 0xFFFFFFFF
        head = struct.pack(
            ">10I20sH",
            int(st.st_ctime) & m,
            st.st_ctime_ns % 1_000_000_000,
            int(st.st_mtime) & m,
            st.st_mtime_ns % 1_000_000_000,
            st.st_dev & m,
            st.st_ino & m,
            mode,
            st.st_uid & m,
            st.st_gid & m,
            st.st_size & m,
            sha,
            min(len(path), 0xFFF),
        )
        return cls(path, mode, sha, head)


class PackWriter:
    """Appends whole objects to a new pack in `pack_dir`; `finish()` writes its index and makes it visible.

    Until `finish()` the pack is a temporary file git ignores, so a crash or a full disk leaves the
    store as it was (`abort()` removes the temporary file).
    """

    def __init__(self, pack_dir: Path, compress_bytes: int | None = None) -> None:
        self.dir = pack_dir
        self.compress_budget = COMPRESS_BYTES if compress_bytes is None else compress_bytes
        """Objects are zlib-compressed (level 1) until this many bytes went in, then stored as they
        are (level 0): compressing 200 MB takes seconds of CPU, copying it a tenth of a second. A
        later `git gc` (run when pruning) compresses what was stored plain."""
        fd, name = tempfile.mkstemp(prefix="tmp_kc_pack_", dir=pack_dir)
        self.tmp = Path(name)
        self._fh = os.fdopen(fd, "wb", buffering=1 << 20)
        self._offset = 12
        self._objects: dict[bytes, tuple[int, int]] = {}  # sha -> (offset, crc32)
        self._budget_lock = threading.Lock()
        self.final: list[Path] = []
        """The `.idx` and `.pack` once in place (removed again by `abort()`: nothing refers to them yet)."""
        self._write(b"PACK" + struct.pack(">II", 2, 0))  # the count is patched in finish()
        self._offset = 12

    def _write(self, data: bytes) -> None:
        self._fh.write(data)
        self._offset += len(data)

    def add(self, kind: int, data: bytes) -> bytes:
        """Store one object (once per id); returns its binary id."""
        return self.put(encode(kind, data, self.take(len(data))))

    def take(self, size: int) -> bool:
        """Whether an object of `size` bytes is compressed: while the budget lasts (see `compress_budget`).
        Called from the hashing threads, hence the lock."""
        with self._budget_lock:
            keep = self.compress_budget > 0
            self.compress_budget -= size
            return keep

    def put(self, obj: Encoded) -> bytes:
        """Append an object encoded by `encode` (once per id); returns its binary id."""
        if obj.sha in self._objects:
            return obj.sha
        offset = self._offset
        self._write(obj.head + obj.body if len(obj.body) < 65536 else obj.head)
        if len(obj.body) >= 65536:
            self._write(obj.body)
        self._objects[obj.sha] = (offset, zlib.crc32(obj.body, zlib.crc32(obj.head)))
        return obj.sha

    @property
    def plain_bytes(self) -> int:
        """Bytes of objects stored uncompressed (past the budget)."""
        return max(0, -self.compress_budget)

    def __len__(self) -> int:
        return len(self._objects)

    def finish(self) -> None:
        """Fix the header, write the `.idx` and rename both into place (the `.idx` last: git finds
        packs by their index, so a pack is visible only once complete)."""
        self._fh.flush()
        self._fh.close()
        # The header's object count was unknown while streaming: patch it, then hash the whole pack.
        with open(self.tmp, "r+b") as fh:
            fh.seek(8)
            fh.write(struct.pack(">I", len(self._objects)))
            fh.seek(0)
            total = hashlib.sha1()
            while chunk := fh.read(1 << 22):
                total.update(chunk)
            checksum = total.digest()
            fh.write(checksum)
        name = checksum.hex()
        idx_tmp = self.tmp.with_name(self.tmp.name + ".idx")
        private_write(idx_tmp, self._index(checksum))
        if (self.dir / f"pack-{name}.idx").exists():  # the very same pack is there already
            self.abort()
            return
        os.replace(self.tmp, self.dir / f"pack-{name}.pack")
        os.replace(idx_tmp, self.dir / f"pack-{name}.idx")
        self.final = [self.dir / f"pack-{name}.idx", self.dir / f"pack-{name}.pack"]

    def _index(self, checksum: bytes) -> bytes:
        shas = sorted(self._objects)
        fanout = [0] * 256
        for sha in shas:
            fanout[sha[0]] += 1
        for i in range(1, 256):
            fanout[i] += fanout[i - 1]
        small: list[int] = []
        large: list[int] = []
        for sha in shas:
            off = self._objects[sha][0]
            if off < 0x80000000:
                small.append(off)
            else:
                small.append(0x80000000 | len(large))
                large.append(off)
        parts = [
            b"\xfftOc" + struct.pack(">I", 2),
            struct.pack(">256I", *fanout),
            b"".join(shas),
            struct.pack(f">{len(shas)}I", *(self._objects[s][1] for s in shas)),
            struct.pack(f">{len(shas)}I", *small),
            struct.pack(f">{len(large)}Q", *large),
            checksum,
        ]
        body = b"".join(parts)
        return body + hashlib.sha1(body).digest()

    def abort(self) -> None:
        try:
            self._fh.close()
        except OSError:
            pass
        self.tmp.unlink(missing_ok=True)
        self.tmp.with_name(self.tmp.name + ".idx").unlink(missing_ok=True)
        for path in self.final:
            path.unlink(missing_ok=True)
        self.final = []


def git_mode(st: os.stat_result) -> int | None:
    """The mode git records for a file, or None for what git does not store (directories, devices)."""
    if statmod.S_ISLNK(st.st_mode):
        return 0o120000
    if statmod.S_ISREG(st.st_mode):
        return 0o100755 if st.st_mode & statmod.S_IXUSR else 0o100644
    return None


@dataclass(frozen=True)
class Encoded:
    """An object ready to append to a pack: its id, pack entry header and (compressed) body."""

    sha: bytes
    head: bytes
    body: bytes


def encode(kind: int, data: bytes, compress: bool) -> Encoded:
    """Hash and compress one object (thread-safe: the slow parts release the GIL)."""
    h = hashlib.sha1(_TYPE_NAMES[kind] + b" %d\0" % len(data))
    h.update(data)
    size = len(data)
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    head = bytearray()
    while size:
        head.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    head.append(byte)
    return Encoded(h.digest(), bytes(head), zlib.compress(data, 1 if compress else 0))


@dataclass(frozen=True)
class _Loaded:
    """One path as read by a hashing thread: gone (deleted), skipped (not a file git stores, unreadable),
    or its stat data, mode and encoded blob."""

    gone: bool = False
    st: os.stat_result | None = None
    mode: int = 0
    obj: Encoded | None = None


def _load(pack: PackWriter, full: str) -> _Loaded:
    """Stat, read and encode one path (runs in a hashing thread)."""
    try:
        st = os.lstat(full)  # before reading: a change while reading leaves stat data git re-checks
        mode = git_mode(st)
        if mode is None:
            return _Loaded()
        data = os.fsencode(os.readlink(full)) if mode == 0o120000 else _read(full)
    except FileNotFoundError:
        return _Loaded(gone=True)
    except OSError:
        return _Loaded()
    return _Loaded(False, st, mode, encode(OBJ_BLOB, data, pack.take(len(data))))


def add_files(pack: PackWriter, root: Path, paths: Iterable[str]) -> tuple[list[Entry], list[str]]:
    """Stat, read and store each path, one at a time (memory stays flat: one file's bytes at a time);
    returns the stored entries and the paths found missing.

    Reading, hashing and compressing in a pool of threads was tried (issue 40) and measured slower on a
    2-core machine: 7-8 s of CPU against 5 s for 50,000 files, the per-file work being mostly Python's."""
    entries: list[Entry] = []
    gone: list[str] = []
    for rel in paths:
        loaded = _load(pack, os.path.join(root, rel))
        if loaded.gone:
            gone.append(rel)
        elif loaded.obj is not None and loaded.st is not None:
            entries.append(
                Entry.of(rel.encode("utf-8", "surrogateescape"), loaded.mode, pack.put(loaded.obj), loaded.st)
            )
    return entries, gone


def _read(path: str) -> bytes:
    with open(path, "rb", buffering=0) as fh:
        return fh.read()


def add_trees(pack: PackWriter, entries: list[Entry]) -> tuple[bytes, bytes]:
    """Store the trees of `entries` (sorted by path); returns the root tree id and the index's
    `TREE` extension body describing every tree."""
    root: dict[bytes, object] = {}
    for e in entries:
        *dirs, name = e.path.split(b"/")
        node = root
        for d in dirs:
            sub = node.setdefault(d + b"/", {})
            assert isinstance(sub, dict)
            node = sub
        node[name] = e
    ext: list[bytes] = []

    def build(node: dict[bytes, object], name: bytes) -> tuple[bytes, int]:
        # git orders tree entries by name, a directory's name compared as if it ended in "/".
        body = bytearray()
        count = 0
        slot = len(ext)
        ext.append(b"")
        subtrees = 0
        for key in sorted(node):
            child = node[key]
            if isinstance(child, Entry):
                body += b"%o %s\0" % (child.mode, key) + child.sha
                count += 1
            else:
                assert isinstance(child, dict)
                sha, n = build(child, key[:-1])
                body += b"40000 %s\0" % key[:-1] + sha
                count += n
                subtrees += 1
        sha = pack.add(OBJ_TREE, bytes(body))
        ext[slot] = name + b"\0%d %d\n" % (count, subtrees) + sha
        return sha, count

    tree, _ = build(root, b"")
    return tree, b"".join(ext)


def write_index(path: Path, entries: list[Entry], tree_ext: bytes | None) -> None:
    """Write a git index v2 (entries sorted by path) atomically, with an optional `TREE` extension."""
    out = bytearray(b"DIRC" + struct.pack(">II", 2, len(entries)))
    for e in entries:
        out += e.head
        out += e.path
        out += b"\0" * (8 - (62 + len(e.path)) % 8)
    if tree_ext is not None:
        out += b"TREE" + struct.pack(">I", len(tree_ext)) + tree_ext
    out += hashlib.sha1(out).digest()
    tmp = path.with_name(path.name + ".lock")  # git's own name: a stale one is cleared under the store lock
    try:
        private_write(tmp, out)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

#!/usr/bin/env python3
"""Patch a tadoc archive for tests, keeping every checksum valid.

Usage:
  archive_patch.py rename ARCHIVE OLD NEW   replace entry name OLD by NEW (same
                                            byte length) in the names section
  archive_patch.py flip ARCHIVE SECTION_ID  flip one byte in the middle of a
                                            section, checksums left stale
  archive_patch.py resum ARCHIVE            recompute every checksum
  archive_patch.py plain ARCHIVE [V]        store zstd-compressed sections
                                            (TD_SECF_ZSTD) uncompressed; with
                                            V (1 or 2) also write the packed
                                            arrays in the version 1-2 layout
                                            (16-byte tiles) and mark the
                                            archive version V
  archive_patch.py sections ARCHIVE         print "id offset size" per section

Layout as in engine/include/td_format.h: a 72-byte little-endian header whose last
field is the XXH3-64 of the bytes before it, a section table of 32-byte
entries (id, flags, offset, size, XXH3-64) checksummed in the header. XXH3
comes from the system's libxxhash through ctypes; zstd frames are decoded
with the zstd command.
"""
import ctypes
import ctypes.util
import struct
import subprocess
import sys

HDR = struct.Struct("<8sIIQIIQQ2QQ")
SEC = struct.Struct("<IIQQQ")
NAMES = 2
SECF_ZSTD = 1
BYTE_SECTIONS = {1, 2, 13, 16, 19}   # meta, names, words, other, rule groups
TILE = 128


def xxh3():
    name = ctypes.util.find_library("xxhash") or "libxxhash.so.0"
    lib = ctypes.CDLL(name)
    f = lib.XXH3_64bits
    f.restype = ctypes.c_uint64
    f.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lambda b: f(bytes(b), len(b))


def unzstd(frame):
    """Content of one zstd frame followed by up to 7 bytes of zero padding."""
    for pad in range(8):
        r = subprocess.run(["zstd", "-d", "-c", "-q"], input=frame[:len(frame) - pad], capture_output=True)
        if r.returncode == 0:
            return r.stdout
    sys.exit("archive_patch: section is not a zstd frame")


def unpack_v3(b):
    """Values of a packed array in the version 3 layout (engine/include/td_pack.h),
    decoded independently of the C reader."""
    n, nt, ds, slope = struct.unpack_from("<4Q", b, 0)
    tiles = struct.unpack_from("<%dQ" % nt, b, 32)
    ng = (nt + 7) // 8
    groups = struct.unpack_from("<%dI" % ng, b, 32 + 8 * nt)
    data = int.from_bytes(b[32 + 8 * nt + (ng * 4 + 7) // 8 * 8:][:ds], "little")
    vals = []
    for i in range(n):
        h = tiles[i // TILE]
        w, rel, lin, base = h & 63, (h >> 6) & 511, (h >> 15) & 1, h >> 16
        j = i % TILE
        v = base + ((slope * j) >> 16 if lin else 0)
        if w:
            bit = (groups[i // TILE // 8] + rel) * 128 + j * w
            v += (data >> bit) & ((1 << w) - 1)
        vals.append(v & (2**64 - 1))
    return vals


def pack_v1(vals):
    """The same values in the version 1-2 layout: u64 n, ntiles, datasize,
    then 16-byte tiles (base, off16, width) and the data."""
    tiles, data, off16 = [], 0, 0
    for t in range(0, len(vals), TILE):
        part = vals[t:t + TILE]
        lo = min(part)
        w = (max(part) - lo).bit_length()
        for j, v in enumerate(part):
            data |= (v - lo) << (off16 * 128 + j * w)
        tiles.append(struct.pack("<QIB3x", lo, off16 if w else 0, w))
        off16 += w
    ds = off16 * 16 + 8
    out = struct.pack("<3Q", len(vals), len(tiles), ds) + b"".join(tiles) + data.to_bytes(ds, "little")
    return out + b"\0" * (-len(out) % 8)


class Archive:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.b = bytearray(f.read())
        h = HDR.unpack_from(self.b, 0)
        self.nsec, self.tab = h[4], h[6]

    def sections(self):
        return [SEC.unpack_from(self.b, self.tab + i * SEC.size) for i in range(self.nsec)]

    def section(self, sid):
        for i, s in enumerate(self.sections()):
            if s[0] == sid:
                return i, s
        sys.exit("archive_patch: no section %d in %s" % (sid, self.path))

    def resum(self):
        h = xxh3()
        for i, (sid, flags, off, size, _) in enumerate(self.sections()):
            SEC.pack_into(self.b, self.tab + i * SEC.size, sid, flags, off, size, h(self.b[off:off + size]))
        tsum = h(self.b[self.tab:self.tab + self.nsec * SEC.size])
        struct.pack_into("<Q", self.b, 40, tsum)
        struct.pack_into("<Q", self.b, HDR.size - 8, h(self.b[:HDR.size - 8]))

    def plain(self, version=None):
        """Rewrite with every compressed section decoded, sections in table order."""
        out, tab = bytearray(self.b[:HDR.size]), []
        for sid, flags, off, size, _ in self.sections():
            data = bytes(self.b[off:off + size])
            if flags & SECF_ZSTD:
                data, flags = unzstd(data), flags & ~SECF_ZSTD
            if version is not None and version < 3 and sid not in BYTE_SECTIONS:
                data = pack_v1(unpack_v3(data))
            tab.append((sid, flags, len(out), len(data)))
            out += data + b"\0" * (-len(data) % 8)
        self.tab = len(out)
        for sid, flags, off, size in tab:
            out += SEC.pack(sid, flags, off, size, 0)
        struct.pack_into("<Q", out, 16, len(out))   # file_size
        struct.pack_into("<Q", out, 32, self.tab)   # sectab_off
        if version is not None:
            struct.pack_into("<I", out, 8, version)
        self.b = out
        self.resum()

    def save(self):
        with open(self.path, "wb") as f:
            f.write(self.b)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd, a = sys.argv[1], Archive(sys.argv[2])
    if cmd == "rename":
        old, new = (x.encode() for x in sys.argv[3:5])
        if len(old) != len(new):
            sys.exit("archive_patch: names must have the same length")
        a.plain()
        _, (_, _, off, size, _) = a.section(NAMES)
        at = a.b.find(old, off, off + size)
        if at < 0:
            sys.exit("archive_patch: name %r not found" % old)
        a.b[at:at + len(old)] = new
        a.resum()
    elif cmd == "flip":
        _, (_, _, off, size, _) = a.section(int(sys.argv[3]))
        a.b[off + size // 2] ^= 0x55
    elif cmd == "resum":
        a.resum()
    elif cmd == "plain":
        a.plain(int(sys.argv[3]) if len(sys.argv) > 3 else None)
    elif cmd == "sections":
        for s in a.sections():
            print(s[0], s[2], s[3])
        return
    else:
        sys.exit(__doc__)
    a.save()


if __name__ == "__main__":
    main()

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
  archive_patch.py setname ARCHIVE OLD NEW  rename the first entry named OLD to
                                            NEW (any length; Python escapes
                                            such as \\x00 are decoded), moving
                                            the name offsets to match
  archive_patch.py setcol ARCHIVE SECTION_ID NAME VALUE
                                            set the per-entry column SECTION_ID
                                            (a packed array) of the entry
                                            named NAME to VALUE
  archive_patch.py replace ARCHIVE SECTION_ID OLD NEW
                                            replace the bytes OLD by NEW (same
                                            length, escapes decoded) in a byte
                                            section (names, words, other)
  Several commands in one run (one interpreter start): separate them with
  ';' arguments, e.g. archive_patch.py flip A 18 ';' plain B 2

Layout as in engine/include/td_format.h: a 72-byte little-endian header whose last
field is the XXH3-64 of the bytes before it, a section table of 32-byte
entries (id, flags, offset, size, XXH3-64) checksummed in the header. XXH3
comes from the system's libxxhash through ctypes; zstd frames are decoded
with the zstd command.
"""
import codecs
import ctypes
import ctypes.util
import struct
import subprocess
import sys

HDR = struct.Struct("<8sIIQIIQQ2QQ")
SEC = struct.Struct("<IIQQQ")
NAMES = 2
E_NAMEOFF = 3
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


def pack_v3(vals):
    """Values in the version 3 layout (engine/include/td_pack.h): flat frames
    (no slope), each tile's data where the one before it ends."""
    nt = (len(vals) + TILE - 1) // TILE
    tiles, groups, data, unit = [], [], 0, 0
    for t in range(nt):
        part = vals[t * TILE:(t + 1) * TILE]
        lo = min(part)
        w = (max(part) - lo).bit_length()
        if t % 8 == 0:
            groups.append(unit)
        for j, v in enumerate(part):
            data |= (v - lo) << (unit * 128 + j * w)
        tiles.append(w | (unit - groups[-1]) << 6 | lo << 16)
        unit += w
    ds = unit * 16 + 8
    g = struct.pack("<%dI" % len(groups), *groups)
    g += b"\0" * (-len(g) % 8)
    return struct.pack("<4Q", len(vals), nt, ds, 0) + struct.pack("<%dQ" % nt, *tiles) + g + data.to_bytes(ds, "little")


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

    def put(self, sid, data):
        """Replace the bytes of section sid (the archive already plain())."""
        out, tab = bytearray(self.b[:HDR.size]), []
        for s, flags, off, size, _ in self.sections():
            d = data if s == sid else bytes(self.b[off:off + size])
            tab.append((s, flags, len(out), len(d)))
            out += d + b"\0" * (-len(d) % 8)
        self.tab = len(out)
        for s, flags, off, size in tab:
            out += SEC.pack(s, flags, off, size, 0)
        struct.pack_into("<Q", out, 16, len(out))
        struct.pack_into("<Q", out, 32, self.tab)
        self.b = out
        self.resum()

    def get(self, sid):
        _, (_, _, off, size, _) = self.section(sid)
        return bytes(self.b[off:off + size])

    def names(self):
        """Every entry's name, from NAMES and E_NAMEOFF."""
        blob, offs = self.get(NAMES), unpack_v3(self.get(E_NAMEOFF))
        return [blob[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]

    def entry(self, name):
        try:
            return self.names().index(name)
        except ValueError:
            sys.exit("archive_patch: no entry named %r" % name)

    def save(self):
        with open(self.path, "wb") as f:
            f.write(self.b)


def main():
    args = sys.argv[1:]
    while ";" in args:
        patch(args[:args.index(";")])
        args = args[args.index(";") + 1:]
    patch(args)


def patch(argv):
    """One command: argv as the command line after the program name."""
    argv = [sys.argv[0]] + argv
    if len(argv) < 3:
        sys.exit(__doc__)
    cmd, a = argv[1], Archive(argv[2])
    if cmd == "rename":
        old, new = (x.encode() for x in argv[3:5])
        if len(old) != len(new):
            sys.exit("archive_patch: names must have the same length")
        a.plain()
        _, (_, _, off, size, _) = a.section(NAMES)
        at = a.b.find(old, off, off + size)
        if at < 0:
            sys.exit("archive_patch: name %r not found" % old)
        a.b[at:at + len(old)] = new
        a.resum()
    elif cmd in ("setname", "setcol", "replace"):
        a.plain()
        arg = [codecs.escape_decode(x.encode())[0] for x in argv[3:]]
        if cmd == "setname":
            names = a.names()
            names[a.entry(arg[0])] = arg[1]
            offs = [0]
            for n in names:
                offs.append(offs[-1] + len(n))
            a.put(NAMES, b"".join(names))
            a.put(E_NAMEOFF, pack_v3(offs))
        elif cmd == "setcol":
            sid = int(arg[0])
            vals = unpack_v3(a.get(sid))
            vals[a.entry(arg[1])] = int(arg[2])
            a.put(sid, pack_v3(vals))
        else:
            sid, old, new = int(arg[0]), arg[1], arg[2]
            data = a.get(sid)
            if len(old) != len(new) or old not in data:
                sys.exit("archive_patch: %r not found, or not as long as %r" % (old, new))
            a.put(sid, data.replace(old, new, 1))
    elif cmd == "flip":
        _, (_, _, off, size, _) = a.section(int(argv[3]))
        a.b[off + size // 2] ^= 0x55
    elif cmd == "resum":
        a.resum()
    elif cmd == "plain":
        a.plain(int(argv[3]) if len(argv) > 3 else None)
    elif cmd == "sections":
        for s in a.sections():
            print(s[0], s[2], s[3])
        return
    else:
        sys.exit(__doc__)
    a.save()


if __name__ == "__main__":
    main()

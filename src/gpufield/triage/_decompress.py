"""Streaming decompression that keeps every byte decoded before a truncation or corruption point.

``gzip.GzipFile.read(n)`` raises ``EOFError`` on a truncated member and drops what it had decoded in
that call (up to a whole read block); a file cut inside its first block then reads as empty although
``zcat`` recovers most of it. :class:`Decoded` feeds the raw bytes to an incremental decompressor
(``zlib.decompressobj``, ``bz2.BZ2Decompressor``, ``lzma.LZMADecompressor``) in small pieces,
returns everything decoded, and raises only once the decoded bytes are used up. Multi-member gzip
(``cat a.gz b.gz``) and multi-stream bzip2/xz are followed; trailing zero padding is ignored.
"""

from __future__ import annotations

import bz2
import lzma
import zlib

RAW_CHUNK = 64 * 1024  # compressed bytes fed at a time (bounds the decoded bytes held at once)


def _decompressor(kind: str):
    if kind == "gzip":
        return zlib.decompressobj(wbits=31)
    if kind == "bzip2":
        return bz2.BZ2Decompressor()
    if kind == "xz":
        return lzma.LZMADecompressor()
    raise ValueError(f"unsupported compression {kind!r} (gzip, bzip2, xz)")


class Decoded:
    """A read-only binary stream of the decompressed bytes of ``raw``.

    Args:
        raw: the compressed file, opened in binary mode (not closed by :meth:`close`).
        kind: ``"gzip"``, ``"bzip2"`` or ``"xz"``.

    ``read(n)`` returns up to ``n`` decoded bytes; after the last decodable byte it raises
    ``EOFError`` (stream ends before its end-of-stream marker) or ``OSError`` (corrupt data) once,
    then returns ``b""``.

    Raises:
        ValueError: unknown ``kind``.
    """

    def __init__(self, raw, kind: str) -> None:
        self._raw, self._kind = raw, kind
        self._d = _decompressor(kind)
        self._buf = bytearray()
        self._in_member = False  # compressed bytes of the current member/stream seen, its end not yet
        self._done = False
        self._err: Exception | None = None

    def _feed(self, data: bytes) -> None:
        while data:
            try:
                self._buf += self._d.decompress(data)
            except (zlib.error, OSError, lzma.LZMAError, EOFError) as e:
                self._err, self._done = OSError(f"corrupt {self._kind} data: {e}"), True
                return
            self._in_member = not self._d.eof
            if not self._d.eof:
                return
            data = self._d.unused_data
            if not data.strip(b"\x00"):
                return  # end of a member, nothing (or only padding) after it so far
            self._d = _decompressor(self._kind)

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` decoded bytes (all remaining when ``n`` < 0); ``b""`` at the end."""
        while (n < 0 or len(self._buf) < n) and not self._done:
            data = self._raw.read(RAW_CHUNK)
            if not data:
                self._done = True
                if self._in_member and self._err is None:
                    self._err = EOFError(f"compressed {self._kind} stream ended before the end-of-stream marker")
                break
            self._feed(data)
        if n < 0 or n >= len(self._buf):
            out = bytes(self._buf)
            self._buf.clear()
        else:
            out = bytes(self._buf[:n])
            del self._buf[:n]
        if not out and self._err is not None:
            err, self._err = self._err, None
            raise err
        return out

    def close(self) -> None:
        """Drop the buffers (the raw file is the caller's to close)."""
        self._buf.clear()
        self._done = True


#: byte-order marks of the UTF-16 encodings (Windows tools and PowerShell's ``>`` write UTF-16 LE with a BOM)
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


class Utf16Text:
    """A byte stream of UTF-16 text (with its BOM) read as UTF-8 bytes, incrementally.

    Args:
        raw: the stream, positioned after ``first``.
        first: bytes already read from ``raw`` (they start with the BOM).

    Undecodable units become U+FFFD (as the line scanner's own UTF-8 decoding does).
    """

    def __init__(self, raw, first: bytes) -> None:
        import codecs

        self._raw = raw
        self._dec = codecs.getincrementaldecoder("utf-16")(errors="replace")
        self._buf = bytearray(self._dec.decode(first).encode("utf-8"))
        self._eof = False

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` UTF-8 bytes (all that is left when ``n < 0``); ``b""`` at the end."""
        while not self._eof and (n < 0 or len(self._buf) < n):
            chunk = self._raw.read(1 << 20 if n < 0 else max(2 * n, 1 << 16))
            if not chunk:
                self._buf += self._dec.decode(b"", final=True).encode("utf-8")
                self._eof = True
                break
            self._buf += self._dec.decode(chunk).encode("utf-8")
        k = len(self._buf) if n < 0 else min(n, len(self._buf))
        out = bytes(self._buf[:k])
        del self._buf[:k]
        return out

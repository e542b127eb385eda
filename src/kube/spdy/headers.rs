//! SPDY/3 header blocks: the name/value layout and its zlib compression
//! with the SPDY/3 preset dictionary (docs/portforward-wire.md §4).
//!
//! One [`Deflater`] per connection for what we send and one [`Inflater`]
//! for what we receive: each is a single zlib stream kept for the whole
//! connection (blocks share the LZ77 window), every block ending on a
//! `SYNC_FLUSH`. Both are made once and never reset; after an error the
//! stream is out of step, so the connection must end (the decoder refuses
//! everything after its first error).
//!
//! The decompressed size of a block is bounded ([`super::Limits`]): a few
//! hundred compressed bytes can inflate to megabytes (a zip bomb), so
//! inflation stops as soon as the output passes the bound.

use super::dictionary::{DICTIONARY, DICTIONARY_ADLER32};
use super::SpdyError;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// A decoded header block: `(name, value)` pairs in wire order. Names are
/// lowercase (the decoder refuses others, as spdystream does); a value
/// holding several values keeps their NUL separators.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    /// An empty block (what the kubelet's SYN_REPLY carries).
    pub fn new() -> Headers {
        Headers(Vec::new())
    }

    /// Builds a block from pairs; names are lowercased as spdystream's
    /// writer does.
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Headers {
        Headers(
            pairs
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), (*v).to_string()))
                .collect(),
        )
    }

    /// The value of `name` (compared without regard to ASCII case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the block has no pairs.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The uncompressed block: `u32 count`, then per pair `u32 len`, name,
    /// `u32 len`, value (big-endian).
    pub fn to_block(&self) -> Result<Vec<u8>, SpdyError> {
        let mut out = Vec::new();
        put_u32(&mut out, self.0.len())?;
        for (name, value) in &self.0 {
            if name.is_empty() {
                return Err(SpdyError::BadHeaderBlock("empty header name".into()));
            }
            put_u32(&mut out, name.len())?;
            out.extend_from_slice(name.to_ascii_lowercase().as_bytes());
            put_u32(&mut out, value.len())?;
            out.extend_from_slice(value.as_bytes());
        }
        Ok(out)
    }

    /// Parses an uncompressed block. Refused as spdystream refuses them
    /// (a connection error): an uppercase or repeated name; also an empty
    /// name, bytes that are not UTF-8, a count or length past the block,
    /// and bytes left over after the last pair (they would desynchronise
    /// nothing in our inflater, but no honest writer sends them).
    pub fn from_block(block: &[u8]) -> Result<Headers, SpdyError> {
        let mut rd = Reader { b: block, pos: 0 };
        let count = rd.u32()? as usize;
        // Each pair needs at least 8 bytes: a hostile count cannot make us
        // reserve memory beyond the (bounded) block.
        if count > block.len() / 8 {
            return Err(SpdyError::BadHeaderBlock(format!(
                "{count} pairs announced in a {}-byte block",
                block.len()
            )));
        }
        let mut pairs: Vec<(String, String)> = Vec::with_capacity(count);
        for _ in 0..count {
            let name = rd.string()?;
            if name.is_empty() {
                return Err(SpdyError::BadHeaderBlock("empty header name".into()));
            }
            if name.bytes().any(|c| c.is_ascii_uppercase()) {
                return Err(SpdyError::UppercaseHeaderName(name));
            }
            if pairs.iter().any(|(n, _)| *n == name) {
                return Err(SpdyError::DuplicateHeader(name));
            }
            let value = rd.string()?;
            pairs.push((name, value));
        }
        if rd.pos != block.len() {
            return Err(SpdyError::BadHeaderBlock(format!(
                "{} bytes after the last pair",
                block.len() - rd.pos
            )));
        }
        Ok(Headers(pairs))
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) -> Result<(), SpdyError> {
    let n = u32::try_from(n)
        .map_err(|_| SpdyError::BadHeaderBlock("header length over 2^32-1".into()))?;
    out.extend_from_slice(&n.to_be_bytes());
    Ok(())
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], SpdyError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| SpdyError::BadHeaderBlock("a length runs past the block".into()))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, SpdyError> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn string(&mut self) -> Result<String, SpdyError> {
        let n = self.u32()? as usize;
        let s = self.take(n)?;
        String::from_utf8(s.to_vec())
            .map_err(|_| SpdyError::BadHeaderBlock("a header name or value is not UTF-8".into()))
    }
}

/// The receiving half: one zlib stream for every header block the peer
/// sends on this connection.
pub struct Inflater {
    z: Decompress,
}

impl Default for Inflater {
    fn default() -> Self {
        Inflater::new()
    }
}

impl Inflater {
    /// A fresh stream (expects a zlib header at the start of the first block).
    pub fn new() -> Inflater {
        Inflater {
            z: Decompress::new(true),
        }
    }

    /// Inflates one compressed block, all of whose bytes must be used and
    /// whose output must not pass `max_out` bytes. A zlib header asking for
    /// a dictionary other than SPDY/3's is refused.
    pub fn inflate(&mut self, input: &[u8], max_out: usize) -> Result<Vec<u8>, SpdyError> {
        let mut out: Vec<u8> = Vec::with_capacity(max_out.min(1024) + 1);
        let mut consumed = 0usize;
        loop {
            let (in0, out0) = (self.z.total_in(), self.z.total_out());
            let res = self
                .z
                .decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync);
            let used = usize::try_from(self.z.total_in() - in0).unwrap_or(usize::MAX);
            consumed = consumed.saturating_add(used).min(input.len());
            let progressed = used > 0 || self.z.total_out() != out0;
            match res {
                Ok(Status::StreamEnd) => {
                    return Err(SpdyError::BadHeaderBlock(
                        "the peer ended its header zlib stream".into(),
                    ))
                }
                Ok(_) => {}
                Err(e) => match e.needs_dictionary() {
                    Some(DICTIONARY_ADLER32) => {
                        self.z.set_dictionary(DICTIONARY).map_err(|e| {
                            SpdyError::BadHeaderBlock(format!("zlib dictionary: {e}"))
                        })?;
                        continue;
                    }
                    Some(other) => {
                        return Err(SpdyError::BadHeaderBlock(format!(
                            "zlib asks for dictionary {other:#010x}, not SPDY/3's"
                        )))
                    }
                    None => return Err(SpdyError::BadHeaderBlock(format!("zlib: {e}"))),
                },
            }
            if out.len() > max_out {
                return Err(SpdyError::HeaderBlockTooLarge { max: max_out });
            }
            let full = out.len() == out.capacity();
            if consumed == input.len() && !full {
                return Ok(out);
            }
            if full {
                let more = out
                    .capacity()
                    .min(max_out.saturating_add(1) - out.len())
                    .max(1);
                out.reserve(more);
            } else if !progressed {
                return Err(SpdyError::BadHeaderBlock(
                    "the compressed block does not end on a flush".into(),
                ));
            }
        }
    }
}

/// The sending half: one zlib stream (level 9, SPDY/3 dictionary, as
/// spdystream writes it: its first block starts `78 F9 E3 C6 A7 C2`).
pub struct Deflater {
    z: Compress,
}

impl Default for Deflater {
    fn default() -> Self {
        Deflater::new()
    }
}

impl Deflater {
    /// A fresh stream with the SPDY/3 dictionary set.
    pub fn new() -> Deflater {
        let mut z = Compress::new(Compression::best(), true);
        // Fails only if called after data was compressed; this is the
        // stream's first call, and a failure would only drop the
        // dictionary (still valid zlib for any peer).
        let _ = z.set_dictionary(DICTIONARY);
        Deflater { z }
    }

    /// Compresses one block and sync-flushes it, appending to `out`.
    pub fn deflate(&mut self, block: &[u8], out: &mut Vec<u8>) -> Result<(), SpdyError> {
        let mut consumed = 0usize;
        loop {
            out.reserve(block.len() - consumed + 64);
            let in0 = self.z.total_in();
            self.z
                .compress_vec(&block[consumed..], out, FlushCompress::Sync)
                .map_err(|e| SpdyError::BadHeaderBlock(format!("zlib: {e}")))?;
            let used = usize::try_from(self.z.total_in() - in0).unwrap_or(usize::MAX);
            consumed = consumed.saturating_add(used).min(block.len());
            // Done once all input is in and the flush did not fill the
            // output (zlib then has nothing pending).
            if consumed == block.len() && out.len() < out.capacity() {
                return Ok(());
            }
        }
    }
}

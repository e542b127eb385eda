//! A ring as a daemon stop persists it (`<state>/sessions/<id>.io/<app>.ring`)
//! and the next start restores it: the [`RingImage`] and its byte format.

use std::fmt;
use tungstenite::Bytes;

/// A ring's frames as persisted: seq, stream byte, data.
pub type RingFrames = Vec<(u32, u8, Bytes)>;

/// A ring as a daemon stop persists it and the next start restores it
/// ([`AppIo::ring_image`](super::ring::AppIo::ring_image), [`AppIo::restore`](super::ring::AppIo::restore)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingImage {
    /// The seq the next frame gets.
    pub next_seq: u32,
    /// When the newest output was pushed (ns since the Unix epoch; 0:
    /// never): the re-adoption asks the container log for what came after.
    pub last_output_ns: u64,
    pub frames: RingFrames,
}

/// First bytes of a persisted ring (version 2: with the last output's
/// time); version 1 (without it) is still read.
const RING_MAGIC: &[u8; 8] = b"KGRING2\n";
const RING_MAGIC_V1: &[u8; 8] = b"KGRING1\n";

/// Why a persisted ring could not be read (the app starts afresh; the
/// error is logged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingError {
    /// The file does not start with a ring's magic.
    BadMagic,
    /// The file ends inside the header or a frame.
    Truncated,
    /// A frame whose seq is not after the one before and before the next.
    OutOfOrder(u32),
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::BadMagic => f.write_str("not a persisted ring (bad magic)"),
            RingError::Truncated => f.write_str("the ring is truncated"),
            RingError::OutOfOrder(seq) => write!(f, "frame seq {seq} out of order"),
        }
    }
}

impl std::error::Error for RingError {}

/// A ring as a daemon stop writes it: the magic, the next seq (u32 BE),
/// the last output's time (u64 BE, ns), then per frame seq (u32 BE),
/// stream byte, length (u32 BE), data.
pub fn encode_ring(img: &RingImage) -> Vec<u8> {
    let size: usize = img.frames.iter().map(|f| 9 + f.2.len()).sum();
    let mut out = Vec::with_capacity(20 + size);
    out.extend_from_slice(RING_MAGIC);
    out.extend_from_slice(&img.next_seq.to_be_bytes());
    out.extend_from_slice(&img.last_output_ns.to_be_bytes());
    for (seq, stream, data) in &img.frames {
        out.extend_from_slice(&seq.to_be_bytes());
        out.push(*stream);
        out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(data);
    }
    out
}

/// Reads [`encode_ring`]'s bytes back; a clear error for anything else
/// (wrong magic, truncation, seqs out of order, a frame at or past the
/// next seq).
pub fn decode_ring(b: &[u8]) -> Result<RingImage, RingError> {
    let (rest, v2) = if let Some(r) = b.strip_prefix(RING_MAGIC.as_slice()) {
        (r, true)
    } else if let Some(r) = b.strip_prefix(RING_MAGIC_V1.as_slice()) {
        (r, false)
    } else {
        return Err(RingError::BadMagic);
    };
    let u32_at = |b: &[u8], at: usize| -> Result<u32, RingError> {
        b.get(at..at + 4)
            .and_then(|x| x.try_into().ok())
            .map(u32::from_be_bytes)
            .ok_or(RingError::Truncated)
    };
    let next_seq = u32_at(rest, 0)?;
    let mut at = 4;
    let mut last_output_ns = 0;
    if v2 {
        last_output_ns = rest
            .get(4..12)
            .and_then(|x| x.try_into().ok())
            .map(u64::from_be_bytes)
            .ok_or(RingError::Truncated)?;
        at = 12;
    }
    let mut frames = Vec::new();
    let mut last = 0u32;
    while at < rest.len() {
        let seq = u32_at(rest, at)?;
        let stream = *rest.get(at + 4).ok_or(RingError::Truncated)?;
        let len = u32_at(rest, at + 5)? as usize;
        let data = rest.get(at + 9..at + 9 + len).ok_or(RingError::Truncated)?;
        if seq <= last || seq >= next_seq {
            return Err(RingError::OutOfOrder(seq));
        }
        last = seq;
        frames.push((seq, stream, Bytes::copy_from_slice(data)));
        at += 9 + len;
    }
    Ok(RingImage {
        next_seq,
        last_output_ns,
        frames,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::io::ring::AppIo;
    use crate::session::io::wire::GAP_STREAM;
    use crate::session::machine::OutStream;

    #[test]
    fn persisted_rings_round_trip_and_bad_bytes_are_errors() {
        let io = AppIo::new(1 << 20);
        io.push(OutStream::Stdout, b"one".to_vec());
        io.push(OutStream::Stderr, b"".to_vec());
        io.push_gap();
        io.push(OutStream::Stderr, vec![0u8, 255]);
        let img = io.ring_image();
        assert_eq!(img.next_seq, 4);
        assert!(img.last_output_ns > 0);
        let bytes = encode_ring(&img);
        let back = decode_ring(&bytes).unwrap();
        assert_eq!(back, img);
        assert_eq!(back.frames[1], (2, GAP_STREAM, Bytes::new()));
        assert_eq!(back.frames[2].2.as_ref(), &[0u8, 255]);
        assert!(decode_ring(b"nope").is_err());
        assert!(decode_ring(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode_ring(&bytes[..15]).is_err(), "a truncated header");
        let image = |next_seq, frames: &[(u32, u8, &'static [u8])]| RingImage {
            next_seq,
            last_output_ns: 7,
            frames: frames
                .iter()
                .map(|(q, s, d)| (*q, *s, Bytes::from_static(d)))
                .collect(),
        };
        let swapped = encode_ring(&image(3, &[(2, 1, b"a"), (1, 1, b"b")]));
        assert!(decode_ring(&swapped).is_err());
        let at_next = encode_ring(&image(2, &[(2, 1, b"a")]));
        assert!(decode_ring(&at_next).is_err(), "a frame at the next seq");
        assert_eq!(
            decode_ring(&encode_ring(&image(1, &[]))).unwrap(),
            image(1, &[])
        );
        // Version 1 (no time of the last output) is still read.
        let mut v1 = b"KGRING1\n".to_vec();
        v1.extend_from_slice(&2u32.to_be_bytes());
        v1.extend_from_slice(&1u32.to_be_bytes());
        v1.push(1);
        v1.extend_from_slice(&1u32.to_be_bytes());
        v1.push(b'x');
        let old = decode_ring(&v1).unwrap();
        assert_eq!(
            (old.next_seq, old.last_output_ns, old.frames.len()),
            (2, 0, 1)
        );
    }
}

//! Unit tests of the SPDY/3 codec: kubectl-shaped bytes, round trips,
//! hostile input.

use super::dictionary::{DICTIONARY, DICTIONARY_ADLER32};
use super::*;

/// kubectl's first two SYN_STREAMs of a connection (error stream 1, data
/// stream 3, `requestid` 0, port 80), compressed as Go's zlib writes them:
/// level 9, the SPDY/3 dictionary, one stream, SYNC_FLUSH per block (made
/// with zlib's own deflate; the second block reuses the first's window).
const KUBECTL_SYN_ERROR: &str = "800300010000003c0000000100000000000078f9e3c6a7c202253a703a2b294a4dcc851625aca9a0808614cb45a024cc64610024398b209198094adc8c0600000000ffff";
const KUBECTL_SYN_DATA: &str =
    "800300010000001a00000003000000000000826a25a406d56850299508000000ffff";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn adler32(b: &[u8]) -> u32 {
    let (mut a, mut s) = (1u32, 0u32);
    for &x in b {
        a = (a + u32::from(x)) % 65521;
        s = (s + a) % 65521;
    }
    s << 16 | a
}

fn all(dec: &mut Decoder) -> Result<Vec<Frame>, SpdyError> {
    let mut v = Vec::new();
    while let Some(f) = dec.next()? {
        v.push(f);
    }
    Ok(v)
}

fn decode_one(bytes: &[u8]) -> Result<Vec<Frame>, SpdyError> {
    let mut dec = Decoder::default();
    dec.push(bytes);
    all(&mut dec)
}

fn err_code(bytes: &[u8]) -> &'static str {
    match decode_one(bytes) {
        Err(e) => e.code(),
        Ok(frames) => panic!("accepted: {frames:?}"),
    }
}

#[test]
fn dictionary_is_spdy3() {
    assert_eq!(DICTIONARY.len(), 1423);
    assert_eq!(adler32(DICTIONARY), DICTIONARY_ADLER32);
    assert_eq!(DICTIONARY_ADLER32, 0xE3C6_A7C2);
    assert!(DICTIONARY.starts_with(b"\0\0\0\x07options\0\0\0\x04head"));
    assert!(DICTIONARY.ends_with(b"charset=utf-8charset=iso-8859-1,utf-,*,enq=0."));
}

fn syn(stream_id: u32, pairs: &[(&str, &str)]) -> Frame {
    Frame::SynStream {
        stream_id,
        assoc_id: 0,
        priority: 0,
        fin: false,
        unidirectional: false,
        headers: Headers::from_pairs(pairs),
    }
}

#[test]
fn kubectl_syn_streams_decode_in_kubectls_message_split() {
    // kubectl writes each field as its own WebSocket message: 2,2,4,4,4,1,1,N.
    let mut dec = Decoder::default();
    for frame in [hex(KUBECTL_SYN_ERROR), hex(KUBECTL_SYN_DATA)] {
        let mut at = 0;
        for n in [2, 2, 4, 4, 4, 1, 1] {
            dec.push(&frame[at..at + n]);
            at += n;
            assert_eq!(dec.next(), Ok(None));
        }
        dec.push(&frame[at..]);
        let f = dec.next().unwrap().unwrap();
        let Frame::SynStream {
            stream_id, headers, ..
        } = f
        else {
            panic!("{f:?}")
        };
        assert_eq!(headers.get("port"), Some("80"));
        assert_eq!(headers.get("requestID"), Some("0"));
        let want = if stream_id == 1 { "error" } else { "data" };
        assert_eq!(headers.get("streamType"), Some(want));
        assert!(dec.at_boundary());
    }
    // kubectl's error-stream FIN: an empty DATA frame with FIN.
    dec.push(&[0, 0, 0, 1, 1, 0, 0, 0]);
    assert_eq!(
        dec.next(),
        Ok(Some(Frame::Data {
            stream_id: 1,
            data: vec![],
            fin: true
        }))
    );
}

#[test]
fn kubectl_bytes_decode_one_byte_at_a_time() {
    let mut bytes = hex(KUBECTL_SYN_ERROR);
    bytes.extend(hex(KUBECTL_SYN_DATA));
    let mut dec = Decoder::default();
    let mut frames = Vec::new();
    for b in bytes {
        dec.push(&[b]);
        frames.extend(all(&mut dec).unwrap());
    }
    assert_eq!(frames.len(), 2);
    assert_eq!(
        frames[1],
        syn(
            3,
            &[("port", "80"), ("requestid", "0"), ("streamtype", "data")]
        )
    );
}

#[test]
fn data_is_handed_out_in_pieces_fin_on_the_last() {
    let mut enc = Encoder::new();
    let mut bytes = Vec::new();
    let frame = Frame::Data {
        stream_id: 3,
        data: (0..100u8).collect(),
        fin: true,
    };
    enc.encode(&frame, &mut bytes).unwrap();
    let mut dec = Decoder::default();
    let mut got = Vec::new();
    let mut fins = 0;
    for part in bytes.chunks(30) {
        dec.push(part);
        for f in all(&mut dec).unwrap() {
            let Frame::Data {
                stream_id,
                data,
                fin,
            } = f
            else {
                panic!()
            };
            assert_eq!(stream_id, 3);
            got.extend(data);
            fins += usize::from(fin);
            assert!(!fin || dec.at_boundary());
        }
    }
    assert_eq!(got, (0..100u8).collect::<Vec<_>>());
    assert_eq!(fins, 1);
}

#[test]
fn every_frame_round_trips_and_header_blocks_share_one_stream() {
    let frames = vec![
        syn(
            1,
            &[("streamtype", "error"), ("port", "80"), ("requestid", "0")],
        ),
        Frame::SynReply {
            stream_id: 1,
            fin: false,
            headers: Headers::new(),
        },
        syn(
            3,
            &[("streamtype", "data"), ("port", "80"), ("requestid", "0")],
        ),
        Frame::Headers {
            stream_id: 3,
            fin: true,
            headers: Headers::from_pairs(&[("x", "a\0b")]),
        },
        Frame::SynStream {
            stream_id: 5,
            assoc_id: 1,
            priority: 7,
            fin: true,
            unidirectional: true,
            headers: Headers::from_pairs(&[("port", "8080")]),
        },
        Frame::Data {
            stream_id: 3,
            data: b"hello".to_vec(),
            fin: false,
        },
        Frame::RstStream {
            stream_id: 3,
            status: RST_CANCEL,
        },
        Frame::Settings {
            flags: 1,
            entries: vec![(0, 4, 100), (1, 7, 65536)],
        },
        Frame::Ping { id: 0x8000_0001 },
        Frame::GoAway {
            last_good_stream_id: 5,
            status: GOAWAY_OK,
        },
        Frame::WindowUpdate {
            stream_id: 3,
            delta: 1000,
        },
    ];
    let mut enc = Encoder::new();
    let mut bytes = Vec::new();
    for f in &frames {
        enc.encode(f, &mut bytes).unwrap();
    }
    // The first header block carries the zlib header with the dictionary id.
    assert_eq!(&bytes[18..24], &[0x78, 0xF9, 0xE3, 0xC6, 0xA7, 0xC2]);
    assert_eq!(decode_one(&bytes).unwrap(), frames);
}

#[test]
fn a_reply_with_an_empty_block_is_the_kubelets() {
    let mut enc = Encoder::new();
    let mut bytes = Vec::new();
    let reply = Frame::SynReply {
        stream_id: 1,
        fin: false,
        headers: Headers::new(),
    };
    enc.encode(&reply, &mut bytes).unwrap();
    assert_eq!(&bytes[..4], &[0x80, 0x03, 0x00, 0x02]);
    assert_eq!(&bytes[8..12], &[0, 0, 0, 1]);
    assert_eq!(decode_one(&bytes).unwrap(), vec![reply]);
}

#[test]
fn role_parity() {
    assert_eq!(Role::Client.first_stream_id(), 1);
    assert_eq!(Role::Server.first_stream_id(), 2);
    assert!(Role::Client.owns_id(1) && !Role::Client.owns_id(2));
    assert!(Role::Server.owns_id(2) && !Role::Server.owns_id(3));
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0x80, 0x03];
    b.extend_from_slice(&kind.to_be_bytes());
    let len = payload.len() as u32;
    b.extend_from_slice(&(u32::from(flags) << 24 | len).to_be_bytes());
    b.extend_from_slice(payload);
    b
}

#[test]
fn hostile_lengths_flags_and_types_are_refused() {
    // DATA over the limit: refused from the head alone.
    let mut dec = Decoder::new(Limits {
        max_data: 1024,
        ..Limits::DEFAULT
    });
    dec.push(&[0, 0, 0, 1, 0, 0, 4, 1]);
    assert_eq!(dec.next().unwrap_err().code(), "SPDY_FRAME_TOO_LARGE");
    assert_eq!(dec.next(), Err(SpdyError::Failed));
    // A control frame announcing 16 MiB: refused before any payload.
    assert_eq!(
        err_code(&[0x80, 3, 0, 1, 0, 0xFF, 0xFF, 0xFF]),
        "SPDY_FRAME_TOO_LARGE"
    );
    assert_eq!(
        err_code(&control(6, 0, &[0, 0, 0, 1, 0, 0, 0, 0])),
        "SPDY_BAD_LENGTH"
    );
    assert_eq!(err_code(&control(6, 1, &[0, 0, 0, 1])), "SPDY_BAD_FLAGS");
    assert_eq!(err_code(&control(6, 0, &[0, 0, 0, 0])), "SPDY_ZERO_FIELD");
    assert_eq!(err_code(&control(7, 0, &[0, 0, 0, 1])), "SPDY_BAD_LENGTH");
    assert_eq!(err_code(&control(7, 2, &[0; 8])), "SPDY_BAD_FLAGS");
    assert_eq!(err_code(&control(9, 0, &[0; 12])), "SPDY_BAD_LENGTH");
    assert_eq!(
        err_code(&control(3, 0, &[0, 0, 0, 1, 0, 0, 0, 0])),
        "SPDY_ZERO_FIELD"
    );
    assert_eq!(
        err_code(&control(3, 0, &[0, 0, 0, 0, 0, 0, 0, 5])),
        "SPDY_ZERO_FIELD"
    );
    assert_eq!(
        err_code(&control(4, 0, &[0, 0, 0, 1, 0])),
        "SPDY_BAD_LENGTH"
    );
    assert_eq!(err_code(&control(1, 0, &[0; 9])), "SPDY_BAD_LENGTH");
    assert_eq!(err_code(&control(2, 0, &[0; 3])), "SPDY_BAD_LENGTH");
    assert_eq!(err_code(&[0, 0, 0, 0, 0, 0, 0, 0]), "SPDY_ZERO_FIELD");
    for unknown in [5u16, 10, 0, 0xFFFF] {
        assert_eq!(
            err_code(&control(unknown, 0, &[])),
            "SPDY_UNKNOWN_CONTROL_TYPE"
        );
    }
    let mut v2 = control(6, 0, &[0, 0, 0, 1]);
    v2[1] = 2;
    assert_eq!(err_code(&v2), "SPDY_BAD_VERSION");
}

/// A SYN_STREAM whose header block is `block`, compressed by a fresh
/// encoder stream (so the decoder's fresh inflater can read it).
fn syn_with_block(stream_id: u32, block: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&stream_id.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    Deflater::new().deflate(block, &mut p).unwrap();
    control(1, 0, &p)
}

fn raw_block(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut b = (pairs.len() as u32).to_be_bytes().to_vec();
    for (n, v) in pairs {
        b.extend_from_slice(&(n.len() as u32).to_be_bytes());
        b.extend_from_slice(n.as_bytes());
        b.extend_from_slice(&(v.len() as u32).to_be_bytes());
        b.extend_from_slice(v.as_bytes());
    }
    b
}

#[test]
fn hostile_header_blocks_are_refused() {
    let upper = raw_block(&[("streamType", "data")]);
    assert_eq!(
        err_code(&syn_with_block(1, &upper)),
        "SPDY_UPPERCASE_HEADER_NAME"
    );
    let dup = raw_block(&[("port", "80"), ("port", "81")]);
    assert_eq!(err_code(&syn_with_block(1, &dup)), "SPDY_DUPLICATE_HEADER");
    let mut long_count = raw_block(&[("port", "80")]);
    long_count[..4].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(
        err_code(&syn_with_block(1, &long_count)),
        "SPDY_BAD_HEADER_BLOCK"
    );
    let mut long_name = raw_block(&[("port", "80")]);
    long_name[4..8].copy_from_slice(&0x7FFF_FFFFu32.to_be_bytes());
    assert_eq!(
        err_code(&syn_with_block(1, &long_name)),
        "SPDY_BAD_HEADER_BLOCK"
    );
    let mut trailing = raw_block(&[("port", "80")]);
    trailing.push(0);
    assert_eq!(
        err_code(&syn_with_block(1, &trailing)),
        "SPDY_BAD_HEADER_BLOCK"
    );
    assert_eq!(
        err_code(&syn_with_block(1, &raw_block(&[("", "x")]))),
        "SPDY_BAD_HEADER_BLOCK"
    );
    // A zip bomb: 1 MiB of zeros compresses to about a kilobyte.
    let bomb = syn_with_block(1, &vec![0u8; 1 << 20]);
    assert!(bomb.len() < 16 * 1024, "{}", bomb.len());
    assert_eq!(err_code(&bomb), "SPDY_HEADER_BLOCK_TOO_LARGE");
    // Not zlib at all.
    let garbage = control(2, 0, &[0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3]);
    assert_eq!(err_code(&garbage), "SPDY_BAD_HEADER_BLOCK");
    // A zlib header asking for another dictionary (DICTID 1).
    let other_dict = control(
        2,
        0,
        &[0, 0, 0, 1, 0x78, 0xF9, 0, 0, 0, 1, 0, 0, 0, 0xFF, 0xFF],
    );
    assert_eq!(err_code(&other_dict), "SPDY_BAD_HEADER_BLOCK");
    // A block cut in the middle: what inflates is not a whole block.
    let mut cut = syn_with_block(1, &raw_block(&[("port", "80"), ("requestid", "7")]));
    let keep = 18 + 4;
    cut.truncate(keep);
    cut[7] = (keep - 8) as u8;
    assert_eq!(err_code(&cut), "SPDY_BAD_HEADER_BLOCK");
}

#[test]
fn a_block_without_the_dictionary_is_accepted() {
    // `78 01` (no FDICT) then one stored block: valid zlib Go would read.
    let block = raw_block(&[("port", "80")]);
    let mut p = vec![0, 0, 0, 1, 0x78, 0x01, 0x00];
    p.extend_from_slice(&(block.len() as u16).to_le_bytes());
    p.extend_from_slice(&(!(block.len() as u16)).to_le_bytes());
    p.extend_from_slice(&block);
    let got = decode_one(&control(2, 0, &p)).unwrap();
    assert_eq!(
        got,
        vec![Frame::SynReply {
            stream_id: 1,
            fin: false,
            headers: Headers::from_pairs(&[("port", "80")])
        }]
    );
}

#[test]
fn the_encoder_refuses_what_a_reader_would() {
    let mut enc = Encoder::new();
    let mut out = Vec::new();
    let big = Frame::Data {
        stream_id: 1,
        data: vec![0; MAX_DATA_LENGTH as usize + 1],
        fin: false,
    };
    assert_eq!(
        enc.encode(&big, &mut out).unwrap_err().code(),
        "SPDY_UNENCODABLE"
    );
    assert_eq!(
        enc.encode(&Frame::Ping { id: 0 }, &mut out)
            .unwrap_err()
            .code(),
        "SPDY_UNENCODABLE"
    );
    assert!(out.is_empty());
}

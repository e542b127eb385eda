//! Tests of [`super`]: heads split anywhere, limits, framing rules, and
//! bodies de-framed however they arrive.

use super::*;

/// The largest error body the exec/attach handshake keeps (its `MAX_BODY`).
const MAX_BODY: usize = 1024 * 1024;

fn lim() -> Limits {
    Limits::default()
}

fn head(bytes: &[u8]) -> Head {
    parse_head(bytes, &lim()).unwrap().unwrap().0
}

#[test]
fn heads_arrive_in_any_pieces() {
    let mut bytes = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n".to_vec();
    let head_len = bytes.len();
    bytes.extend_from_slice(&[0x82, 0x01, 0x01]);
    for cut in 0..head_len {
        assert_eq!(parse_head(&bytes[..cut], &lim()), Ok(None), "cut {cut}");
    }
    let (head, n) = parse_head(&bytes, &lim()).unwrap().unwrap();
    assert_eq!(n, head_len);
    assert_eq!(head.code, 101);
    assert_eq!(head.reason, "Switching Protocols");
    assert_eq!(head.header("UPGRADE"), Some("websocket"));
    assert!(head.has_token("connection", "upgrade"));
    assert!(parse_head(b"garbage\r\n\r\n", &lim()).is_err());
    assert!(parse_head(&vec![b'a'; MAX_HEAD_BYTES], &lim()).is_err());
    let mut endless = b"HTTP/1.1 200 OK\r\nX-A: ".to_vec();
    endless.resize(MAX_HEAD_BYTES, b'a');
    assert_eq!(
        parse_head(&endless, &lim()),
        Err(ResponseError::HeadTooLarge {
            limit: MAX_HEAD_BYTES
        })
    );
    assert_eq!(
        ResponseError::HeadTooLarge { limit: 65536 }.to_string(),
        "response head larger than 65536 bytes"
    );
}

#[test]
fn limits_and_strictness() {
    // A complete head larger than the limit is refused too.
    let small = Limits {
        max_head_bytes: 32,
        strict_crlf: false,
    };
    let big = b"HTTP/1.1 200 OK\r\nX-Long: aaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    assert!(matches!(
        parse_head(big, &small),
        Err(ResponseError::HeadTooLarge { limit: 32 })
    ));
    // Too many headers.
    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(
        parse_head(&many, &lim()),
        Err(ResponseError::TooManyHeaders)
    );
    // Bare LF: taken by default, refused when strict.
    let bare = b"HTTP/1.1 200 OK\nContent-Length: 0\n\n";
    assert_eq!(head(bare).header("content-length"), Some("0"));
    let strict = Limits {
        strict_crlf: true,
        ..lim()
    };
    assert!(matches!(
        parse_head(bare, &strict),
        Err(ResponseError::Malformed(_))
    ));
    // obs-fold is refused.
    let folded = b"HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\n\r\n";
    assert!(matches!(
        parse_head(folded, &lim()),
        Err(ResponseError::Malformed(_))
    ));
}

#[test]
fn interim_answers_are_skipped() {
    let bytes = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let (h, n) = parse_final_head(bytes, &lim()).unwrap().unwrap();
    assert_eq!(h.code, 200);
    assert_eq!(&bytes[n..], b"ok");
    for cut in 0..bytes.len() - 2 {
        assert_eq!(
            parse_final_head(&bytes[..cut], &lim()),
            Ok(None),
            "cut {cut}"
        );
    }
    // 101 is final.
    let up = b"HTTP/1.1 101 Switching Protocols\r\n\r\n\x82\x00";
    let (h, n) = parse_final_head(up, &lim()).unwrap().unwrap();
    assert_eq!((h.code, &up[n..]), (101, &b"\x82\x00"[..]));
}

#[test]
fn framing_rules() {
    assert_eq!(
        framing(&head(
            b"HTTP/1.1 400 Bad\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
        )),
        Framing::Chunked
    );
    assert_eq!(
        framing(&head(b"HTTP/1.1 500 X\r\n\r\n")),
        Framing::UntilClose
    );
    assert_eq!(
        framing(&head(b"HTTP/1.1 204 X\r\n\r\n")),
        Framing::Length(0)
    );
    assert_eq!(
        framing(&head(b"HTTP/1.1 200 X\r\nContent-Length: 7\r\n\r\n")),
        Framing::Length(7)
    );
    // The last coding decides; a non-chunked one reads to close.
    assert_eq!(
        framing(&head(
            b"HTTP/1.1 200 X\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
        )),
        Framing::Chunked
    );
    assert_eq!(
        framing(&head(
            b"HTTP/1.1 200 X\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"
        )),
        Framing::UntilClose
    );
    // A HEAD answer has no body, whatever it announces.
    let h = head(b"HTTP/1.1 200 X\r\nContent-Length: 7\r\n\r\n");
    assert_eq!(checked_framing(&h, true), Ok(Framing::Length(0)));
    // Duplicates: equal ones are one length, differing ones are refused.
    let same = head(b"HTTP/1.1 200 X\r\nContent-Length: 3\r\nContent-Length: 3, 3\r\n\r\n");
    assert_eq!(checked_framing(&same, false), Ok(Framing::Length(3)));
    let differ = head(b"HTTP/1.1 200 X\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n");
    assert!(matches!(
        checked_framing(&differ, false),
        Err(ResponseError::BadFraming(_))
    ));
    let bad = head(b"HTTP/1.1 200 X\r\nContent-Length: +3\r\n\r\n");
    assert!(checked_framing(&bad, false).is_err());
    // The lenient one reads such a body to close.
    assert_eq!(framing(&differ), Framing::UntilClose);
}

#[test]
fn error_bodies() {
    let status = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","code":404}"#;
    let mut resp = format!(
        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        status.len()
    )
    .into_bytes();
    resp.extend_from_slice(status);
    // Every split between head+first bytes and the rest.
    let (h, n) = parse_head(&resp, &lim()).unwrap().unwrap();
    assert_eq!(framing(&h), Framing::Length(status.len() as u64));
    for cut in n..resp.len() {
        let mut r = BodyCollector::new(framing(&h), &resp[n..cut], MAX_BODY);
        assert_eq!(r.body(false), None, "cut {cut}");
        r.push(&resp[cut..]);
        assert_eq!(r.body(false).as_deref(), Some(&status[..]));
    }
    // Extra bytes after the body are not part of it.
    let mut r = BodyCollector::new(Framing::Length(3), b"abcdef", MAX_BODY);
    assert_eq!(r.body(false).as_deref(), Some(&b"abc"[..]));
    // A cut body yields what came, at EOF.
    r = BodyCollector::new(Framing::Length(10), b"abc", MAX_BODY);
    assert_eq!(r.body(false), None);
    assert_eq!(r.body(true).as_deref(), Some(&b"abc"[..]));
    // Until close.
    let r = BodyCollector::new(Framing::UntilClose, b"text", MAX_BODY);
    assert_eq!(r.body(false), None);
    assert_eq!(r.body(true).as_deref(), Some(&b"text"[..]));
    // Oversized bodies are cut, not grown without bound.
    let mut r = BodyCollector::new(Framing::UntilClose, &[], MAX_BODY);
    for _ in 0..40 {
        r.push(&[b'x'; 64 * 1024]);
    }
    assert_eq!(r.body(false).map(|b| b.len()), Some(MAX_BODY));
}

/// What a lenient collector holds of a chunked body: the payload so far,
/// and whether it is over (the last chunk seen, or the framing broke).
fn decode_chunked(raw: &[u8]) -> (Vec<u8>, bool) {
    let r = BodyCollector::new(Framing::Chunked, raw, MAX_BODY);
    let done = r.body(false).is_some();
    (r.body(true).unwrap_or_default(), done)
}

#[test]
fn chunked_bodies() {
    let raw = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n";
    assert_eq!(decode_chunked(raw), (b"hello world".to_vec(), true));
    for cut in 0..raw.len() {
        let (partial, done) = decode_chunked(&raw[..cut]);
        assert!(b"hello world".starts_with(&partial), "cut {cut}");
        // Done once the terminal "0\r\n" line is in.
        assert_eq!(done, cut >= 30, "cut {cut}");
        let mut r = BodyCollector::new(Framing::Chunked, &raw[..cut], MAX_BODY);
        assert_eq!(r.body(false).is_some(), done);
        r.push(&raw[cut..]);
        assert_eq!(r.body(false).as_deref(), Some(&b"hello world"[..]));
    }
    // Garbage sizes end the body.
    assert_eq!(decode_chunked(b"zz\r\nabc"), (Vec::new(), true));
    assert_eq!(decode_chunked(b"3\r\nabcXY"), (b"abc".to_vec(), true));
}

#[test]
fn decoder_is_strict_and_incremental() {
    // Extensions and trailers, any split, and the bytes after the body left.
    let raw = b"5;name=\"v\"\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\nX-Other: 2\r\n\r\nNEXT";
    let body_len = raw.len() - 4;
    for cut in 0..raw.len() {
        let mut dec = BodyDecoder::new(Framing::Chunked);
        let mut out = Vec::new();
        let a = dec.feed(&raw[..cut], &mut out).unwrap();
        let b = dec.feed(&raw[a..], &mut out).unwrap();
        assert_eq!(a + b, body_len, "cut {cut}");
        assert!(dec.is_done());
        assert_eq!(out, b"hello world");
    }
    let mut dec = BodyDecoder::new(Framing::Chunked);
    assert!(matches!(
        dec.feed(b"3\r\nabcXY", &mut Vec::new()),
        Err(ResponseError::Chunked(_))
    ));
    // Length: the rest is not the body; EOF before the end is an error.
    let mut dec = BodyDecoder::new(Framing::Length(3));
    let mut out = Vec::new();
    assert_eq!(dec.feed(b"abcdef", &mut out), Ok(3));
    assert!(dec.is_done() && out == b"abc");
    let mut dec = BodyDecoder::new(Framing::Length(3));
    dec.feed(b"ab", &mut Vec::new()).unwrap();
    assert_eq!(dec.finish(), Err(ResponseError::Truncated));
    let dec = BodyDecoder::new(Framing::UntilClose);
    assert!(!dec.is_done());
    assert_eq!(dec.finish(), Ok(()));
}

/// A reader that hands out one byte per read.
struct Trickle<'a>(&'a [u8]);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.0.split_first() {
            Some((b, rest)) if !buf.is_empty() => {
                buf[0] = *b;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

#[test]
fn body_reader_over_any_reads() {
    let raw = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    for cut in 0..raw.len() {
        let mut r = BodyReader::new(Trickle(&raw[cut..]), raw[..cut].to_vec(), Framing::Chunked);
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        assert_eq!(out, b"hello world", "cut {cut}");
        assert!(r.is_done());
    }
    let mut r = BodyReader::new(Trickle(b"lo!!"), b"hel".to_vec(), Framing::Length(5));
    let mut out = Vec::new();
    r.read_to_end(&mut out).unwrap();
    assert_eq!(out, b"hello");
    let mut r = BodyReader::new(Trickle(b"lo"), b"hel".to_vec(), Framing::Length(9));
    let e = r.read_to_end(&mut Vec::new()).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    let mut r = BodyReader::new(Trickle(b"lo"), b"hel".to_vec(), Framing::UntilClose);
    let mut out = Vec::new();
    r.read_to_end(&mut out).unwrap();
    assert_eq!(out, b"hello");
}

#[test]
fn complete_responses() {
    let (h, body) = parse_complete(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        &lim(),
    )
    .unwrap();
    assert_eq!((h.code, body.as_slice()), (200, &b"ok"[..]));
    let (h, body) = parse_complete(b"HTTP/1.1 404 NF\r\n\r\ngone", &lim()).unwrap();
    assert_eq!((h.code, body.as_slice()), (404, &b"gone"[..]));
    assert_eq!(
        parse_complete(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab", &lim()),
        Err(ResponseError::Truncated)
    );
    assert_eq!(
        parse_complete(b"HTTP/1.1 200 OK\r\n", &lim()),
        Err(ResponseError::Truncated)
    );
}

#[test]
fn a_collector_decodes_chunks_as_they_come_and_stops_where_the_framing_breaks() {
    let raw = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let mut r = BodyCollector::new(Framing::Chunked, &[], MAX_BODY);
    for (i, b) in raw.iter().enumerate() {
        assert_eq!(r.body(false).is_some(), i >= 24, "byte {i}");
        r.push(std::slice::from_ref(b));
    }
    assert_eq!(r.body(false).as_deref(), Some(&b"hello world"[..]));
    // A broken size line ends the body where it broke, without waiting for EOF.
    let r = BodyCollector::new(Framing::Chunked, b"5\r\nhello\r\nzz\r\nmore", MAX_BODY);
    assert_eq!(r.body(false).as_deref(), Some(&b"hello"[..]));
}

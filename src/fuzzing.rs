//! Entry points for the cargo-fuzz targets in `fuzz/` (see docs/fuzzing.md):
//! each feeds arbitrary bytes to one parser that reads untrusted input and
//! checks only that it never panics, hangs or grows without bound. Kept in
//! the library so crate-private parsers can be reached without making them
//! public API. Not for other callers.

/// The HTTP/1.1 request-head parser, target splitting and the chunked body
/// decoder of the server.
pub fn http_request(data: &[u8]) {
    if let Ok(Some(head)) = crate::http::parse::parse_head(data, 64 * 1024, true) {
        let _ = crate::http::parse::split_target(&head.target);
        let mut out = Vec::new();
        let mut dec = crate::http::parse::ChunkedDecoder::new(1 << 20, 16 * 1024);
        let _ = dec.feed(&data[head.len.min(data.len())..], &mut out);
    }
}

/// The watch-stream decoder, fed in pieces whose sizes come from the data.
pub fn watch_stream(data: &[u8]) {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let step = usize::from(split).max(1);
    let mut dec = crate::kube::watch::WatchDecoder::with_max_event_size(1 << 16);
    for chunk in rest.chunks(step) {
        dec.push(chunk);
        while let Some(ev) = dec.next_event() {
            if let Ok(ev) = ev {
                let _ = ev.resource_version();
                let _ = ev.as_status();
                let _ = ev.is_expired();
            }
        }
    }
    let _ = dec.finish();
}

/// The exec/attach channel protocol: frame classification under both
/// protocols, the channel-3 status decoder, and the resize stream.
pub fn channel(data: &[u8]) {
    use crate::kube::channel::{self, Frame, Protocol, ResizeDecoder, StatusCollector};
    let _ = Frame::parse(Protocol::V4, data);
    let _ = Frame::parse(Protocol::V5, data);
    let _ = channel::decode_exit_status(data);
    let mut c = StatusCollector::new();
    for part in data.chunks(7) {
        c.push(part);
    }
    let _ = c.finish(true);
    let _ = c.finish(false);
    let mut r = ResizeDecoder::new();
    r.push(data);
    for _ in r.by_ref() {}
}

/// The Kubernetes protobuf body decoder the sim applies to kubectl's
/// typed requests.
pub fn protobuf(data: &[u8]) {
    let _ = crate::kube::protobuf::decode(data);
}

/// The interactive exec frame codec (`kubegate.exec.v1`), both directions:
/// the first byte picks binary or text, the rest is the message.
pub fn exec_frames(data: &[u8]) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let m = if kind & 1 == 0 {
        tungstenite::Message::Binary(rest.to_vec().into())
    } else {
        match std::str::from_utf8(rest) {
            Ok(t) => tungstenite::Message::Text(t.into()),
            Err(_) => return,
        }
    };
    if let Ok(Some(f)) = crate::exec::frames::ClientFrame::decode(&m, 64 * 1024) {
        let again = crate::exec::frames::ClientFrame::decode(&f.encode(), 64 * 1024);
        assert!(
            again.is_ok(),
            "a decoded client frame re-encodes to a valid one"
        );
    }
    if let Ok(Some(f)) = crate::exec::frames::ServerFrame::decode(&m) {
        let _ = f.encode();
    }
}

/// The server-sent-events parser, fed in pieces whose sizes come from the
/// data; the events must not depend on the chunking.
pub fn sse(data: &[u8]) {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let step = usize::from(split).max(1);
    let drain = |p: &mut crate::session::sse::SseParser| {
        std::iter::from_fn(|| p.next_event()).collect::<Vec<_>>()
    };
    let mut chunked = crate::session::sse::SseParser::new(4096);
    let mut by_chunks = Vec::new();
    for chunk in rest.chunks(step) {
        chunked.push(chunk);
        by_chunks.extend(drain(&mut chunked));
    }
    let mut whole = crate::session::sse::SseParser::new(4096);
    whole.push(rest);
    assert_eq!(
        by_chunks,
        drain(&mut whole),
        "events depend on the chunking"
    );
    assert_eq!(chunked.last_event_id(), whole.last_event_id());
    assert_eq!(chunked.retry(), whole.retry());
}

/// The SPDY/3 frame decoder of port-forward (header blocks inflated with
/// the dictionary), fed in pieces whose sizes come from the data; every
/// frame decoded is re-encoded by a fresh encoder and must decode again.
pub fn spdy(data: &[u8]) {
    use crate::kube::spdy::{Decoder, Encoder, Limits};
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let step = usize::from(split).max(1);
    let mut dec = Decoder::new(Limits::DEFAULT);
    let mut enc = Encoder::new();
    let mut out = Vec::new();
    'feed: for chunk in rest.chunks(step) {
        dec.push(chunk);
        loop {
            match dec.next() {
                Ok(Some(frame)) => {
                    if enc.encode(&frame, &mut out).is_ok() {
                        let mut again = Decoder::new(Limits::DEFAULT);
                        again.push(&out);
                        while let Ok(Some(_)) = again.next() {}
                    }
                    out.clear();
                }
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
    }
}

/// The kubelet API's SPDY remotecommand half (`sim::kubelet_api::streams`):
/// the first byte picks the subprotocol version and the streams asked
/// for, the second the chunk size; the rest is SPDY from a client, whose
/// SYN_STREAMs go to the stream set and whose resize DATA to the resize
/// decoder. The set must never hold more roles than it expects. The same
/// bytes also go to the subprotocol negotiation and the final-words
/// encoder.
pub fn kubelet_streams(data: &[u8]) {
    use crate::kube::channel::ResizeDecoder;
    use crate::kube::spdy::{Decoder, Frame, Limits};
    use crate::sim::kubelet_api::streams::{self, StreamSet, StreamType, Wanted, SERVER_PROTOCOLS};
    let [pick, split, rest @ ..] = data else {
        return;
    };
    let version = SERVER_PROTOCOLS[usize::from(pick % 5)];
    let wanted = Wanted {
        stdin: pick & 0x08 != 0,
        stdout: pick & 0x10 != 0,
        stderr: pick & 0x20 != 0,
        tty: pick & 0x40 != 0,
    };
    let _ = streams::negotiate(String::from_utf8_lossy(rest).split('\n'));
    let _ = streams::final_words(version, rest);
    let now = std::time::Instant::now();
    let mut set = StreamSet::new(version, wanted, now);
    let mut dec = Decoder::new(Limits::DEFAULT);
    let mut resize = ResizeDecoder::new();
    'feed: for chunk in rest.chunks(usize::from(*split).max(1)) {
        dec.push(chunk);
        loop {
            match dec.next() {
                Ok(Some(Frame::SynStream {
                    stream_id, headers, ..
                })) => {
                    let _ = set.offer(stream_id, &headers);
                    let held = [set.error, set.stdin, set.stdout, set.stderr, set.resize]
                        .iter()
                        .filter(|s| s.is_some())
                        .count();
                    assert!(held <= set.expected(), "more roles than expected");
                    let _ = set.expired(now);
                }
                Ok(Some(Frame::Data {
                    stream_id, data, ..
                })) => {
                    if set.role_of(stream_id) == Some(StreamType::Resize) {
                        resize.push(&data);
                        for _ in resize.by_ref() {}
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_fuzz_entry_takes_real_and_random_input() {
        use crate::kube::spdy::{Encoder, Frame};
        let mut enc = Encoder::new();
        let mut bytes = vec![0x7c, 3];
        for (id, kind) in [(1, "error"), (3, "stdin"), (5, "resize"), (7, "stdout")] {
            let f = Frame::SynStream {
                stream_id: id,
                assoc_id: 0,
                priority: 0,
                fin: false,
                unidirectional: false,
                headers: crate::kube::spdy::Headers::from_pairs(&[("streamtype", kind)]),
            };
            enc.encode(&f, &mut bytes).expect("encode");
        }
        let resize = Frame::Data {
            stream_id: 5,
            data: b"{\"Width\":3,\"Height\":4}\n{\"Wid".to_vec(),
            fin: false,
        };
        enc.encode(&resize, &mut bytes).expect("encode");
        super::kubelet_streams(&bytes);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for len in 0..2000usize {
            let input: Vec<u8> = (0..len % 300)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            super::kubelet_streams(&input);
            // Mutations of the real session.
            let mut m = bytes.clone();
            let at = (x as usize) % m.len();
            m[at] ^= (x >> 8) as u8 | 1;
            super::kubelet_streams(&m);
        }
    }
}

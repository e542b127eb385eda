//! Wire-format tests against the real captures in tests/fixtures/kube:
//! watch streams split at every byte offset and at random, and (in
//! `meta_*`) typed object round-trips.

use kubegate::kube::channel::{self, Frame, Protocol, ResizeDecoder, StatusCollector};
use kubegate::kube::meta::{self, Object, ObjectMeta, OwnerReference};
use kubegate::kube::status::Status;
use kubegate::kube::watch::{
    bookmark_event, encode_event_raw, error_event, EventType, RawEvent, WatchDecoder,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

fn fixture(rel: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/kube/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Decodes `chunks` pushed one after another; every event must decode.
fn decode_chunks<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Vec<RawEvent> {
    let mut d = WatchDecoder::new();
    let mut out = Vec::new();
    for c in chunks {
        d.push(c);
        while let Some(ev) = d.next_event() {
            out.push(ev.expect("event decodes"));
        }
    }
    d.finish().expect("no partial event at the end");
    out
}

/// What the reference line-by-line parse of an ndjson file gives.
fn reference(bytes: &[u8]) -> Vec<(EventType, Value)> {
    std::str::from_utf8(bytes)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let ty = EventType::parse(v["type"].as_str().unwrap()).unwrap();
            (ty, v["object"].clone())
        })
        .collect()
}

#[test]
fn pods_stream_decodes_whole() {
    let bytes = fixture("watch/pods-watch-stream-kind-2023.ndjson");
    let evs = decode_chunks([&bytes[..]]);
    let want = reference(&bytes);
    assert_eq!(evs.len(), 6);
    for (e, (ty, obj)) in evs.iter().zip(&want) {
        assert_eq!((&e.ty, &e.object), (ty, obj));
    }
    let types: Vec<EventType> = evs.iter().map(|e| e.ty).collect();
    use EventType::*;
    assert_eq!(types, [Added, Added, Modified, Modified, Modified, Deleted]);
    assert_eq!(evs[0].resource_version(), Some("744176"));
}

#[test]
fn pods_stream_split_at_every_byte_offset() {
    // A cut only affects the event it falls in, so every offset of every
    // event is tried on that event alone (debug-build JSON parsing of the
    // whole 28 KB stream 28,000 times takes half a minute), and the whole
    // stream is cut at a stride to cover cuts beside and between events.
    let bytes = fixture("watch/pods-watch-stream-kind-2023.ndjson");
    let full = decode_chunks([&bytes[..]]);
    let mut start = 0;
    for (i, line) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
        for cut in 0..=line.len() {
            let (a, b) = line.split_at(cut);
            let got = decode_chunks([a, b]);
            assert_eq!(got.len(), 1, "event {i} split at {cut}");
            assert_eq!(got[0], full[i], "event {i} split at {cut}");
        }
        start += line.len();
    }
    assert_eq!(start, bytes.len());
    for cut in (0..=bytes.len()).step_by(31) {
        let (a, b) = bytes.split_at(cut);
        assert_eq!(decode_chunks([a, b]), full, "stream split at {cut}");
    }
    // Every event boundary, exactly and one byte either side.
    let mut pos = 0;
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        pos += line.len();
        for cut in [pos - 1, pos, (pos + 1).min(bytes.len())] {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(decode_chunks([a, b]), full, "stream split at {cut}");
        }
    }
}

#[test]
fn bookmark_and_error_lines_split_at_every_byte_offset() {
    let bytes = fixture("watch/bookmark-and-error-events.ndjson");
    let want = reference(&bytes);
    for cut in 0..=bytes.len() {
        for cut2 in [cut, (cut + 7).min(bytes.len()), bytes.len()] {
            let got = decode_chunks([&bytes[..cut], &bytes[cut..cut2], &bytes[cut2..]]);
            let got: Vec<(EventType, Value)> = got.into_iter().map(|e| (e.ty, e.object)).collect();
            assert_eq!(got, want, "split at {cut}/{cut2}");
        }
    }
    let evs = decode_chunks([&bytes[..]]);
    assert_eq!(evs[0].ty, EventType::Bookmark);
    assert_eq!(evs[0].resource_version(), Some("3845"));
    assert_eq!(evs[0].object["spec"]["containers"], Value::Null);
    assert_eq!(evs[1].resource_version(), Some("1"));
    assert!(!evs[0].is_expired());
    assert_eq!(evs[2].ty, EventType::Error);
    assert!(evs[2].is_expired());
    let st = evs[2].as_status().unwrap();
    assert_eq!(st.code, 410);
    assert_eq!(st.message, "too old resource version: 657887 (680402)");
}

#[test]
fn random_splits_and_separators_property() {
    let mut rng = StdRng::seed_from_u64(0x6b75_6265);
    let pods = fixture("watch/pods-watch-stream-kind-2023.ndjson");
    let marks = fixture("watch/bookmark-and-error-events.ndjson");
    let mut lines: Vec<Vec<u8>> = Vec::new();
    for src in [&pods, &marks] {
        for l in src.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            lines.push(l.to_vec());
        }
    }
    lines.push(bookmark_event("apps/v1", "Deployment", "77"));
    lines.push(error_event(&Status::gone("gone")));
    let seps: [&[u8]; 5] = [b"", b"\n", b"\r\n", b" \t ", b"\n\n"];
    for round in 0..300 {
        // A random stream: random lines, random separators between them.
        let n = rng.random_range(1..12);
        let mut stream = Vec::new();
        let mut want = Vec::new();
        for _ in 0..n {
            let l = &lines[rng.random_range(0..lines.len())];
            let v: Value = serde_json::from_slice(l).unwrap();
            want.push((
                EventType::parse(v["type"].as_str().unwrap()).unwrap(),
                v["object"].clone(),
            ));
            stream.extend_from_slice(l);
            stream.extend_from_slice(seps[rng.random_range(0..seps.len())]);
        }
        // Random chunking, including many tiny chunks.
        let mut chunks = Vec::new();
        let mut i = 0;
        while i < stream.len() {
            let max = if rng.random_bool(0.3) { 8 } else { 4096 };
            let len = rng.random_range(1..=max).min(stream.len() - i);
            chunks.push(&stream[i..i + len]);
            i += len;
        }
        let got: Vec<(EventType, Value)> = decode_chunks(chunks.iter().copied())
            .into_iter()
            .map(|e| (e.ty, e.object))
            .collect();
        assert_eq!(got, want, "round {round}");
    }
}

#[test]
fn raw_fast_path_equals_value_path_semantically() {
    let bytes = fixture("watch/pods-watch-stream-kind-2023.ndjson");
    for ev in decode_chunks([&bytes[..]]) {
        let obj_bytes = serde_json::to_vec(&ev.object).unwrap();
        let line = encode_event_raw(ev.ty, &obj_bytes);
        assert_eq!(line.last(), Some(&b'\n'));
        let back = decode_chunks([&line[..]]);
        assert_eq!(back, vec![ev]);
    }
}

#[test]
fn oversized_event_is_an_error_not_oom() {
    let bytes = fixture("watch/pods-watch-stream-kind-2023.ndjson");
    let mut d = WatchDecoder::with_max_event_size(1024);
    let mut saw_err = false;
    for c in bytes.chunks(100) {
        d.push(c);
        if let Some(r) = d.next_event() {
            let e = r.unwrap_err();
            assert!(e.is_fatal());
            saw_err = true;
            break;
        }
    }
    assert!(saw_err);
}

fn object_fixtures() -> Vec<(String, Vec<u8>)> {
    let root = format!("{}/tests/fixtures/kube", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in ["pods", "workloads", "service", "ingress"] {
        let mut files: Vec<_> = std::fs::read_dir(format!("{root}/{dir}"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        for f in files {
            out.push((f.display().to_string(), std::fs::read(&f).unwrap()));
        }
    }
    out
}

#[test]
fn meta_every_object_fixture_round_trips_through_typed_structs() {
    let fixtures = object_fixtures();
    assert_eq!(fixtures.len(), 12);
    for (name, bytes) in fixtures {
        let want: Value = serde_json::from_slice(&bytes).unwrap();
        // Whole object: typed metadata, the rest flattened.
        let obj: Object = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(serde_json::to_value(&obj).unwrap(), want, "{name}");
        // Metadata alone.
        let m: ObjectMeta = serde_json::from_value(want["metadata"].clone()).unwrap();
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            want["metadata"],
            "{name}"
        );
        assert!(!m.name().is_empty(), "{name}");
        assert!(m.uid.is_some() && m.resource_version.is_some(), "{name}");
        assert!(m.creation_timestamp().is_some(), "{name}");
        // Every owner reference alone.
        for r in want["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let o: OwnerReference = serde_json::from_value(r.clone()).unwrap();
            assert_eq!(&serde_json::to_value(&o).unwrap(), r, "{name}");
        }
        // Untouched fields survive a read-modify-write.
        let mut edited = obj.clone();
        edited
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("kubegate/test".into(), "1".into());
        let mut back = serde_json::to_value(&edited).unwrap();
        meta::remove_path(&mut back, &["metadata", "labels", "kubegate/test"]);
        if want["metadata"].get("labels").is_none() {
            meta::remove_path(&mut back, &["metadata", "labels"]);
        }
        assert_eq!(back, want, "{name}");
    }
}

#[test]
fn meta_watch_and_bookmark_objects_round_trip() {
    for file in [
        "watch/pods-watch-stream-kind-2023.ndjson",
        "watch/bookmark-and-error-events.ndjson",
    ] {
        let bytes = fixture(file);
        for ev in decode_chunks([&bytes[..]]) {
            let obj: Object = serde_json::from_value(ev.object.clone()).unwrap();
            assert_eq!(serde_json::to_value(&obj).unwrap(), ev.object, "{file}");
        }
    }
    let m: ObjectMeta = serde_json::from_value(
        reference(&fixture("watch/bookmark-and-error-events.ndjson"))[0].1["metadata"].clone(),
    )
    .unwrap();
    assert_eq!(m.resource_version.as_deref(), Some("3845"));
    assert_eq!(m.creation_timestamp(), None);
}

#[test]
fn meta_ownership_chain_pod_rs_deployment_by_uid() {
    let dep: Value =
        serde_json::from_slice(&fixture("workloads/deployment-dice-roller-2020.json")).unwrap();
    let rs: Value = serde_json::from_slice(&fixture(
        "workloads/replicaset-dice-roller-6c8646bfd-2020.json",
    ))
    .unwrap();
    let owner = meta::controller_ref(&rs).unwrap();
    assert_eq!(owner.kind, "Deployment");
    assert_eq!(Some(owner.uid.as_str()), meta::meta_str(&dep, "uid"));
    assert_eq!(meta::labels(&rs)["pod-template-hash"], "6c8646bfd");

    let pod: Value =
        serde_json::from_slice(&fixture("pods/pod-running-rs-owned-2024.json")).unwrap();
    let owner = meta::controller_ref(&pod).unwrap();
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("ReplicaSet", Some(true))
    );
    assert_eq!(owner.name, "robusta-runner-6958c5bdd8");
    assert_eq!(meta::get_str(&pod, &["status", "phase"]), Some("Running"));
    let bare: Value =
        serde_json::from_slice(&fixture("pods/pod-crashloopbackoff-2018.json")).unwrap();
    assert!(meta::controller_ref(&bare).is_none());
}

/// Random and mutated input never panics any decoder
/// (docs/fuzzing.md#no-panic-on-input). Mutations of real events reach deeper than pure noise.
#[test]
fn decoders_never_panic_on_random_or_mutated_bytes() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut seeds: Vec<Vec<u8>> = fixture("watch/bookmark-and-error-events.ndjson")
        .split(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    seeds.push(channel::exit_status_json(3));
    seeds.push(channel::internal_error_status_json("x"));
    seeds.push(channel::resize_payload(channel::TermSize {
        width: 1,
        height: 2,
    }));
    seeds.push(b"{[\"\\\"]}".to_vec());
    for round in 0..3000 {
        let mut input = if round % 3 == 0 {
            (0..rng.random_range(0..64))
                .map(|_| rng.random::<u8>())
                .collect::<Vec<u8>>()
        } else {
            seeds[rng.random_range(0..seeds.len())].clone()
        };
        for _ in 0..rng.random_range(0..4) {
            if input.is_empty() {
                break;
            }
            let i = rng.random_range(0..input.len());
            match rng.random_range(0..3) {
                0 => input[i] = rng.random(),
                1 => {
                    input.remove(i);
                }
                _ => input.insert(i, b"{}[]\"\\:,0"[rng.random_range(0..9)]),
            }
        }
        let mut d = WatchDecoder::with_max_event_size(256);
        for c in input.chunks(rng.random_range(1..8)) {
            d.push(c);
            for _ in 0..64 {
                match d.next_event() {
                    Some(Ok(ev)) => {
                        let _ = (ev.resource_version(), ev.is_expired());
                    }
                    Some(Err(e)) if e.is_fatal() => break,
                    Some(Err(_)) => {}
                    None => break,
                }
            }
        }
        let _ = d.finish();
        let mut r = ResizeDecoder::new();
        r.push(&input);
        for _ in 0..64 {
            if r.next_size().is_none() {
                break;
            }
        }
        let _ = channel::decode_exit_status(&input);
        let mut c = StatusCollector::new();
        c.push(&input);
        let _ = c.finish(false);
        let _ = Status::from_response(rng.random_range(0..700), "application/json", &input);
        let _ = Status::from_response(429, "text/plain", &input);
        let _ = (
            Frame::parse(Protocol::V5, &input),
            Frame::parse(Protocol::V4, &input),
        );
        let _ = channel::decode_frame(&input);
    }
}

/// The SPDY/3 decoder of port-forward: mutated real frames (header blocks
/// through one zlib stream) fed in random splits never panic, and what it
/// holds stays under one control frame plus one push
/// (docs/fuzzing.md#no-panic-on-input).
#[test]
fn spdy_decoder_never_panics_on_mutated_frames() {
    use kubegate::kube::spdy::{Decoder, Encoder, Frame as Spdy, Headers, Limits};
    let mut rng = StdRng::seed_from_u64(11);
    let mut enc = Encoder::new();
    let mut stream = Vec::new();
    let frames = [
        Spdy::SynStream {
            stream_id: 1,
            assoc_id: 0,
            priority: 0,
            fin: false,
            unidirectional: false,
            headers: Headers::from_pairs(&[
                ("streamtype", "error"),
                ("port", "80"),
                ("requestid", "0"),
            ]),
        },
        Spdy::SynReply {
            stream_id: 1,
            fin: false,
            headers: Headers::new(),
        },
        Spdy::Data {
            stream_id: 1,
            data: b"hello".to_vec(),
            fin: true,
        },
        Spdy::Ping { id: 1 },
        Spdy::GoAway {
            last_good_stream_id: 1,
            status: 0,
        },
        Spdy::Settings {
            flags: 0,
            entries: vec![(0, 4, 100)],
        },
        Spdy::WindowUpdate {
            stream_id: 1,
            delta: 9,
        },
        Spdy::RstStream {
            stream_id: 1,
            status: 5,
        },
    ];
    for f in &frames {
        enc.encode(f, &mut stream).unwrap();
    }
    let limits = Limits {
        max_control: 256,
        max_header_block: 256,
        ..Limits::DEFAULT
    };
    for _ in 0..3000 {
        let mut input = stream.clone();
        for _ in 0..rng.random_range(1..6) {
            let i = rng.random_range(0..input.len());
            match rng.random_range(0..3) {
                0 => input[i] = rng.random(),
                1 => {
                    input.remove(i);
                }
                _ => input.insert(i, rng.random()),
            }
        }
        let mut d = Decoder::new(limits);
        let step = rng.random_range(1..40);
        'feed: for c in input.chunks(step) {
            d.push(c);
            loop {
                match d.next() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
            assert!(d.buffered() <= 8 + 256 + step, "{}", d.buffered());
        }
    }
}

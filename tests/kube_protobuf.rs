//! `kube::protobuf` against real kubectl 1.32 bodies (tests/fixtures/protobuf,
//! see its README): each `<case>.pb` is what `kubectl create ...` POSTed, each
//! `<case>.json` what the same command prints with `--dry-run=client -o json`.
//! Plus malformed input: every failure is a clean error, never a panic.

use kubegate::kube::protobuf::{self, ProtobufError, MAX_DEPTH};
use serde_json::{json, Value};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/protobuf/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const CASES: &[&str] = &[
    "configmap_literal",
    "configmap_file",
    "secret_generic",
    "namespace",
    "deployment_command",
    "deployment_port",
    "service_clusterip",
    "service_nodeport",
    "ingress_rule",
    "ingress_tls",
];

/// The decoded body equals the object kubectl prints for the same command.
///
/// No differences are ignored: the dry-run printer marshals the same typed
/// Go object with `encoding/json`, so `creationTimestamp: null`, `status: {}`,
/// `resources: {}`, `strategy: {}` and `status.loadBalancer: {}` appear on
/// both sides (the decoder reproduces Go's rule that `omitempty` never omits
/// a struct). The comparison is of `serde_json::Value`s, so key order and
/// whitespace do not matter.
#[test]
fn decodes_every_captured_kubectl_body_to_its_dry_run_json() {
    for case in CASES {
        let body = fixture(&format!("{case}.pb"));
        let want: Value = serde_json::from_slice(&fixture(&format!("{case}.json")))
            .unwrap_or_else(|e| panic!("{case}.json: {e}"));
        let got = protobuf::decode(&body).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(
            got,
            want,
            "{case}:\n got  {}\n want {}",
            serde_json::to_string_pretty(&got).unwrap(),
            serde_json::to_string_pretty(&want).unwrap()
        );
    }
}

#[test]
fn fixtures_were_sent_as_protobuf() {
    let commands: Value = serde_json::from_slice(&fixture("commands.json")).unwrap();
    let commands = commands.as_array().unwrap();
    assert_eq!(commands.len(), CASES.len());
    for c in commands {
        let ct = c["content_type"].as_str().unwrap();
        assert!(protobuf::is_protobuf(ct), "{c}");
        assert!(CASES.contains(&c["name"].as_str().unwrap()), "{c}");
    }
}

#[test]
fn spot_checks_on_real_bodies() {
    let d = protobuf::decode(&fixture("deployment_port.pb")).unwrap();
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    // containerPort has no omitempty; the port kubectl set survives.
    assert_eq!(c["ports"][0]["containerPort"], json!(8080));
    assert_eq!(d["spec"]["replicas"], json!(1));
    let s = protobuf::decode(&fixture("service_nodeport.pb")).unwrap();
    assert_eq!(s["spec"]["ports"][0]["targetPort"], json!(8080));
    assert_eq!(s["spec"]["ports"][0]["nodePort"], json!(30080));
    let i = protobuf::decode(&fixture("ingress_tls.pb")).unwrap();
    let port = &i["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"];
    assert_eq!(port, &json!({"name": "http"}));
    let cm = protobuf::decode(&fixture("configmap_file.pb")).unwrap();
    assert_eq!(cm["binaryData"]["bin"], json!("AAEC//4="));
}

#[test]
fn content_type_detection() {
    assert!(protobuf::is_protobuf("application/vnd.kubernetes.protobuf"));
    assert!(protobuf::is_protobuf(
        "Application/VND.Kubernetes.Protobuf; charset=binary"
    ));
    assert!(protobuf::is_protobuf(
        "application/vnd.kubernetes.protobuf;stream=watch"
    ));
    assert!(!protobuf::is_protobuf("application/json"));
    assert!(!protobuf::is_protobuf(
        "application/vnd.kubernetes.protobuf+json"
    ));
    assert!(!protobuf::is_protobuf(""));
}

// ---------------------------------------------------------------------------
// Hand-built bodies

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(num: u64, wire: u8, out: &mut Vec<u8>) {
    varint((num << 3) | u64::from(wire), out);
}

fn ld(num: u64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    tag(num, 2, &mut out);
    varint(data.len() as u64, &mut out);
    out.extend_from_slice(data);
    out
}

fn vi(num: u64, v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    tag(num, 0, &mut out);
    varint(v, &mut out);
    out
}

fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut tm = ld(1, api_version.as_bytes());
    tm.extend(ld(2, kind.as_bytes()));
    let mut body = b"k8s\0".to_vec();
    body.extend(ld(1, &tm));
    body.extend(ld(2, raw));
    body
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn unknown_fields_are_skipped_at_every_level() {
    let meta = cat(&[
        ld(1, b"x"),
        vi(99, 7),                                // unknown varint
        ld(100, b"junk"),                         // unknown bytes
        vec![0x9d, 0x06, 1, 2, 3, 4],             // field 99, fixed32
        vec![0xa1, 0x06, 1, 2, 3, 4, 5, 6, 7, 8], // field 100, fixed64
        vec![0xab, 0x06, 0x08, 0x01, 0xac, 0x06], // field 101, group { 1: 1 }
    ]);
    let raw = cat(&[
        ld(1, &meta),
        ld(2, &cat(&[ld(1, b"k"), ld(2, b"v")])),
        vi(50, 1),
    ]);
    let mut body = envelope("v1", "ConfigMap", &raw);
    body.extend(vi(9, 1)); // unknown envelope field
    assert_eq!(
        protobuf::decode(&body).unwrap(),
        json!({
            "kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "x", "creationTimestamp": null},
            "data": {"k": "v"}
        })
    );
}

#[test]
fn go_json_semantics_for_pointers_structs_and_special_types() {
    // Secret: data is base64, immutable is a pointer (false is kept).
    let raw = cat(&[
        ld(1, &ld(1, b"s")),
        ld(2, &cat(&[ld(1, b"bin"), ld(2, &[0, 0xff])])),
        vi(5, 0),
    ]);
    let got = protobuf::decode(&envelope("v1", "Secret", &raw)).unwrap();
    assert_eq!(got["data"], json!({"bin": "AP8="}));
    assert_eq!(got["immutable"], json!(false));

    // Metadata times: seconds only, RFC 3339 UTC; a set but empty pointer
    // Time is null; ownerReferences keep their non-omitempty fields.
    let meta = cat(&[
        ld(1, b"p"),
        ld(8, &cat(&[vi(1, 1_700_000_000), vi(2, 123)])),
        ld(9, &[]),
        ld(13, &cat(&[ld(1, b"ReplicaSet"), ld(3, b"rs"), vi(6, 1)])),
    ]);
    // Pod with a container probe (inline handler, IntOrString port by name),
    // a resource limit (Quantity), an env var from a field ref, and a volume
    // (inline source).
    let probe = cat(&[
        ld(
            1,
            &cat(&[ld(
                2,
                &cat(&[ld(1, b"/healthz"), ld(2, &cat(&[vi(1, 1), ld(3, b"http")]))]),
            )]),
        ),
        vi(4, 5),
    ]);
    let resources = ld(1, &cat(&[ld(1, b"cpu"), ld(2, &ld(1, b"500m"))]));
    let env = cat(&[ld(1, b"NODE"), ld(3, &ld(1, &ld(2, b"spec.nodeName")))]);
    let container = cat(&[
        ld(1, b"c"),
        ld(2, b"busybox"),
        ld(6, &vi(3, 0)), // containerPort 0 is still written
        ld(7, &env),
        ld(8, &resources),
        ld(10, &probe),
    ]);
    let volume = cat(&[
        ld(1, b"cfg"),
        ld(2, &ld(19, &cat(&[ld(1, &ld(1, b"cm")), vi(3, 0o644)]))),
    ]);
    let spec = cat(&[ld(1, &volume), ld(2, &container)]);
    let raw = cat(&[ld(1, &meta), ld(2, &spec), ld(3, &[])]);
    let got = protobuf::decode(&envelope("v1", "Pod", &raw)).unwrap();
    assert_eq!(
        got,
        json!({
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {
                "name": "p",
                "creationTimestamp": "2023-11-14T22:13:20Z",
                "deletionTimestamp": null,
                "ownerReferences": [{
                    "apiVersion": "", "kind": "ReplicaSet", "name": "rs", "uid": "",
                    "controller": true
                }]
            },
            "spec": {
                "volumes": [{"name": "cfg", "configMap": {"name": "cm", "defaultMode": 420}}],
                "containers": [{
                    "name": "c",
                    "image": "busybox",
                    "ports": [{"containerPort": 0}],
                    "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                    "resources": {"limits": {"cpu": "500m"}},
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5}
                }]
            },
            "status": {}
        })
    );

    // Deployment: selector is a pointer without omitempty (null when unset),
    // template is a struct (always written), maxSurge an IntOrString pointer.
    let strategy = cat(&[
        ld(1, b"RollingUpdate"),
        ld(2, &ld(2, &cat(&[vi(1, 1), ld(3, b"25%")]))),
    ]);
    let raw = ld(2, &cat(&[vi(1, 0), ld(4, &strategy)]));
    let got = protobuf::decode(&envelope("apps/v1", "Deployment", &raw)).unwrap();
    assert_eq!(
        got["spec"],
        json!({
            "replicas": 0,
            "selector": null,
            "template": {"metadata": {"creationTimestamp": null}, "spec": {"containers": null}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}}
        })
    );
    assert_eq!(got["metadata"], json!({"creationTimestamp": null}));
    assert_eq!(got["status"], json!({}));
}

#[test]
fn negative_and_packed_integers() {
    // int32 -1 arrives as a ten-byte varint; int64 repeated may be packed.
    let mut packed = Vec::new();
    varint(1000, &mut packed);
    varint(u64::MAX, &mut packed);
    let psc = cat(&[ld(4, &packed), vi(4, 7), vi(2, u64::MAX)]);
    let spec = cat(&[ld(14, &psc), vi(25, u64::MAX)]);
    let got = protobuf::decode(&envelope("v1", "Pod", &ld(2, &spec))).unwrap();
    assert_eq!(got["spec"]["priority"], json!(-1));
    assert_eq!(
        got["spec"]["securityContext"],
        json!({"runAsUser": -1, "supplementalGroups": [1000, -1, 7]})
    );
}

#[test]
fn repeated_embedded_messages_merge_like_protobuf() {
    // Two occurrences of metadata: fields merge, later scalars win, maps join.
    let raw = cat(&[
        ld(
            1,
            &cat(&[ld(1, b"a"), ld(11, &cat(&[ld(1, b"x"), ld(2, b"1")]))]),
        ),
        ld(
            1,
            &cat(&[ld(1, b"b"), ld(11, &cat(&[ld(1, b"y"), ld(2, b"2")]))]),
        ),
    ]);
    let got = protobuf::decode(&envelope("v1", "Namespace", &raw)).unwrap();
    assert_eq!(
        got["metadata"],
        json!({"name": "b", "creationTimestamp": null, "labels": {"x": "1", "y": "2"}})
    );
    assert_eq!(got["spec"], json!({}));
}

#[test]
fn invalid_utf8_becomes_replacement_characters_like_go() {
    let raw = ld(1, &ld(1, &[b'a', 0xff, b'b']));
    let got = protobuf::decode(&envelope("v1", "Namespace", &raw)).unwrap();
    assert_eq!(got["metadata"]["name"], json!("a\u{fffd}b"));
}

// ---------------------------------------------------------------------------
// Malformed input

#[test]
fn wrong_magic() {
    assert_eq!(protobuf::decode(b""), Err(ProtobufError::BadMagic));
    assert_eq!(protobuf::decode(b"k8s"), Err(ProtobufError::BadMagic));
    assert_eq!(
        protobuf::decode(b"{\"kind\":1}"),
        Err(ProtobufError::BadMagic)
    );
    assert_eq!(
        protobuf::decode(b"k8s\x01\n\x00"),
        Err(ProtobufError::BadMagic)
    );
}

#[test]
fn unsupported_kinds_and_envelopes() {
    assert_eq!(
        protobuf::decode(&envelope("v1", "Node", &[])),
        Err(ProtobufError::UnsupportedKind {
            api_version: "v1".into(),
            kind: "Node".into()
        })
    );
    assert_eq!(
        protobuf::decode(&envelope("apps/v2", "Deployment", &[])),
        Err(ProtobufError::UnsupportedKind {
            api_version: "apps/v2".into(),
            kind: "Deployment".into()
        })
    );
    assert!(matches!(
        protobuf::decode(b"k8s\0"),
        Err(ProtobufError::UnsupportedKind { .. })
    ));
    let mut body = envelope("v1", "ConfigMap", &[]);
    body.extend(ld(3, b"gzip"));
    assert!(matches!(
        protobuf::decode(&body),
        Err(ProtobufError::UnsupportedEncoding { .. })
    ));
    let mut body = envelope("v1", "ConfigMap", &[]);
    body.extend(ld(4, b"application/json"));
    assert!(matches!(
        protobuf::decode(&body),
        Err(ProtobufError::UnsupportedEncoding { .. })
    ));
    let mut body = envelope("v1", "ConfigMap", &[]);
    body.extend(ld(4, b"application/vnd.kubernetes.protobuf"));
    assert!(protobuf::decode(&body).is_ok());
    for (v, k) in protobuf::supported_kinds() {
        assert!(protobuf::decode(&envelope(v, k, &[])).is_ok(), "{v} {k}");
    }
}

#[test]
fn truncated_varints_and_lengths_past_the_end() {
    // Envelope level: an (unknown) varint field whose varint never ends.
    assert_eq!(
        protobuf::decode(b"k8s\0\x48\x80"),
        Err(ProtobufError::Truncated)
    );
    // A tag cut in the middle.
    assert_eq!(
        protobuf::decode(b"k8s\0\x80"),
        Err(ProtobufError::Truncated)
    );
    // A length past the end of the body.
    assert_eq!(
        protobuf::decode(b"k8s\0\x12\x05ab"),
        Err(ProtobufError::Truncated)
    );
    // Huge length.
    let mut body = b"k8s\0\x12".to_vec();
    varint(u64::MAX >> 1, &mut body);
    assert_eq!(protobuf::decode(&body), Err(ProtobufError::Truncated));
    // Eleven-byte varint.
    let mut body = b"k8s\0\x48".to_vec();
    body.extend([0xff; 10]);
    body.push(0x01);
    assert_eq!(protobuf::decode(&body), Err(ProtobufError::VarintOverflow));
    // Inside the object: truncated metadata, truncated varint in a field,
    // truncated fixed-width skip.
    for raw in [
        vec![0x0a, 0x05, 0x0a],
        vec![0x12, 0x02, 0x0a, 0x05],
        vec![0x0a, 0x02, 0x38, 0x80],
        vec![0x0a, 0x03, 0x9d, 0x06, 0x01],
    ] {
        assert_eq!(
            protobuf::decode(&envelope("v1", "ConfigMap", &raw)),
            Err(ProtobufError::Truncated),
            "{raw:?}"
        );
    }
}

#[test]
fn bad_tags_and_wire_types() {
    // Field number 0.
    assert_eq!(
        protobuf::decode(&envelope("v1", "ConfigMap", &[0x02, 0x00])),
        Err(ProtobufError::InvalidFieldNumber(0))
    );
    // Wire types 6 and 7.
    assert_eq!(
        protobuf::decode(&envelope("v1", "ConfigMap", &[0x7e])),
        Err(ProtobufError::InvalidWireType(6))
    );
    // A stray end-group.
    assert_eq!(
        protobuf::decode(&envelope("v1", "ConfigMap", &[0x7c])),
        Err(ProtobufError::InvalidWireType(4))
    );
    // metadata (a message) sent as a varint.
    assert_eq!(
        protobuf::decode(&envelope("v1", "ConfigMap", &vi(1, 3))),
        Err(ProtobufError::WrongWireType {
            message: "ConfigMap",
            field: 1,
            wire_type: 0
        })
    );
    // immutable (a bool) sent as bytes.
    assert!(matches!(
        protobuf::decode(&envelope("v1", "ConfigMap", &ld(4, b"x"))),
        Err(ProtobufError::WrongWireType { field: 4, .. })
    ));
    // An IntOrString of type 2.
    let port = cat(&[vi(1, 2), vi(2, 80)]);
    let svc = ld(2, &ld(1, &cat(&[vi(3, 80), ld(4, &port)])));
    assert_eq!(
        protobuf::decode(&envelope("v1", "Service", &svc)),
        Err(ProtobufError::InvalidIntOrString(2))
    );
    // A negative time.
    let meta = ld(1, &ld(8, &vi(1, u64::MAX)));
    assert_eq!(
        protobuf::decode(&envelope("v1", "ConfigMap", &meta)),
        Err(ProtobufError::InvalidTime(-1))
    );
}

#[test]
fn deep_nesting_is_bounded() {
    // Unknown field 15 as nested start-groups, far deeper than allowed.
    let mut raw = vec![0x7b; 10_000];
    raw.extend(vec![0x7c; 10_000]);
    assert_eq!(
        protobuf::decode(&envelope("v1", "ConfigMap", &raw)),
        Err(ProtobufError::TooDeep)
    );
    // Nesting just inside the limit is fine.
    let depth = MAX_DEPTH - 2;
    let mut raw = vec![0x7b; depth];
    raw.extend(vec![0x7c; depth]);
    assert!(protobuf::decode(&envelope("v1", "ConfigMap", &raw)).is_ok());
    // Unterminated groups are truncated input.
    assert_eq!(
        protobuf::decode(&envelope("v1", "ConfigMap", &[0x7b, 0x7b])),
        Err(ProtobufError::Truncated)
    );
}

/// Cutting a real body anywhere, or flipping any byte, never panics.
#[test]
fn every_prefix_and_every_byte_flip_is_handled() {
    for case in CASES {
        let body = fixture(&format!("{case}.pb"));
        for end in 0..body.len() {
            let _ = protobuf::decode(&body[..end]);
        }
        for i in 0..body.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut b = body.clone();
                b[i] ^= x;
                let _ = protobuf::decode(&b);
            }
        }
    }
}

#[test]
fn errors_display() {
    let e = ProtobufError::UnsupportedKind {
        api_version: "v1".into(),
        kind: "Node".into(),
    };
    assert_eq!(e.to_string(), "no protobuf decoder for v1, Kind=Node");
    let _: &dyn std::error::Error = &e;
}

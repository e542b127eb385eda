//! Decoding of Kubernetes protobuf request bodies into the JSON the same
//! request would have carried.
//!
//! Why it exists: kubectl's typed clients (`kubectl create configmap|secret|
//! namespace|deployment|service|ingress ...`) send their bodies as
//! `application/vnd.kubernetes.protobuf` (while accepting JSON back). The sim
//! keeps objects as `serde_json::Value`, so it needs the JSON a JSON client
//! would have sent for the same Go object.
//!
//! What it owns: the `k8s\0` magic and `runtime.Unknown` envelope, the
//! protobuf wire format (varints, length-delimited fields, packed repeats,
//! skipping of unknown fields and groups), and a compact schema table for the
//! kinds the sim accepts (see [`supported_kinds`]). Field numbers and JSON
//! names come from upstream `generated.proto` / `types.go` (kubernetes/api
//! `core/v1`, `apps/v1`, `networking/v1`, `authorization/v1`,
//! `authentication/v1`; kubernetes/apimachinery
//! `pkg/apis/meta/v1`, `pkg/util/intstr`, `pkg/api/resource`,
//! `pkg/runtime`). The output follows Go's `encoding/json` rules for the
//! decoded Go struct: `omitempty` drops zero scalars and empty slices/maps,
//! but never a non-pointer struct (hence `status: {}`, `resources: {}`,
//! `creationTimestamp: null`); a pointer is written iff it was set; fields
//! without `omitempty` are always written (`containerPort: 0`, a nil slice as
//! `null`). `metav1.Time` keeps whole seconds (upstream ignores `nanos` too).
//!
//! What it never does: encode (the sim always answers JSON, which the
//! `Accept` header allows), validate or default objects (that is the sim's
//! admission), canonicalize `resource.Quantity` strings (they are passed
//! through as sent; Go clients always send canonical ones), or do I/O.
//! Malformed input is a [`ProtobufError`], never a panic: this parses
//! network input. Nesting is bounded by [`MAX_DEPTH`]; the output is at most
//! a small constant factor larger than the input (an empty embedded message
//! expands to its non-`omitempty` fields), so callers should bound the body
//! size as they do for JSON.

use base64::Engine;
use serde_json::{Map, Number, Value};
use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Deepest nesting (embedded messages, groups in skipped fields) accepted.
pub const MAX_DEPTH: usize = 32;

/// Largest protobuf field number (2^29 - 1).
const MAX_FIELD_NUMBER: u64 = (1 << 29) - 1;

/// `9999-12-31T23:59:59Z`, the last instant Go's `Time.MarshalJSON` accepts.
const MAX_TIME_SECS: i64 = 253_402_300_799;

/// Why a body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtobufError {
    /// The body does not start with `k8s\0`.
    BadMagic,
    /// The input ended inside a tag, varint, fixed-width value or
    /// length-delimited field (including a length past the end).
    Truncated,
    /// A varint longer than ten bytes.
    VarintOverflow,
    /// A field number of 0 or above 2^29 - 1.
    InvalidFieldNumber(u64),
    /// Wire type 6 or 7, or an end-group with no start-group.
    InvalidWireType(u8),
    /// A known field arrived with a wire type its type cannot have.
    WrongWireType {
        message: &'static str,
        field: u32,
        wire_type: u8,
    },
    /// Nesting deeper than [`MAX_DEPTH`].
    TooDeep,
    /// The envelope says the raw object is compressed or not protobuf.
    UnsupportedEncoding {
        content_encoding: String,
        content_type: String,
    },
    /// No schema for this apiVersion/kind (the sim answers 415).
    UnsupportedKind { api_version: String, kind: String },
    /// An `IntOrString` whose `type` is neither 0 (int) nor 1 (string).
    InvalidIntOrString(i64),
    /// A `metav1.Time` outside what Kubernetes' JSON can express here
    /// (before 1970 or after 9999).
    InvalidTime(i64),
    /// A `managedFields[].fieldsV1` whose raw bytes are not JSON.
    InvalidFieldsV1,
}

impl fmt::Display for ProtobufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtobufError::BadMagic => write!(f, "protobuf body does not start with the k8s magic"),
            ProtobufError::Truncated => write!(f, "protobuf body is truncated"),
            ProtobufError::VarintOverflow => write!(f, "protobuf varint overflows 64 bits"),
            ProtobufError::InvalidFieldNumber(n) => write!(f, "invalid protobuf field number {n}"),
            ProtobufError::InvalidWireType(w) => write!(f, "invalid protobuf wire type {w}"),
            ProtobufError::WrongWireType {
                message,
                field,
                wire_type,
            } => write!(f, "{message} field {field}: unexpected wire type {wire_type}"),
            ProtobufError::TooDeep => {
                write!(f, "protobuf nesting deeper than {MAX_DEPTH} levels")
            }
            ProtobufError::UnsupportedEncoding {
                content_encoding,
                content_type,
            } => write!(
                f,
                "unsupported protobuf envelope (contentEncoding {content_encoding:?}, contentType {content_type:?})"
            ),
            ProtobufError::UnsupportedKind { api_version, kind } => {
                write!(f, "no protobuf decoder for {api_version}, Kind={kind}")
            }
            ProtobufError::InvalidIntOrString(t) => write!(f, "invalid IntOrString type {t}"),
            ProtobufError::InvalidTime(s) => write!(f, "time {s}s since the epoch is out of range"),
            ProtobufError::InvalidFieldsV1 => write!(f, "fieldsV1 is not valid JSON"),
        }
    }
}

impl std::error::Error for ProtobufError {}

/// True if `content_type` names the Kubernetes protobuf media type
/// (parameters such as `;stream=watch` and case are ignored).
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .eq_ignore_ascii_case(MEDIA_TYPE)
}

/// The `(apiVersion, kind)` pairs [`decode`] understands.
pub fn supported_kinds() -> impl Iterator<Item = (&'static str, &'static str)> {
    KINDS.iter().map(|(v, k, _)| (*v, *k))
}

/// Decodes a `k8s\0`-prefixed `runtime.Unknown` body into the JSON object
/// Kubernetes' JSON encoding of the same Go object would be, with
/// `apiVersion` and `kind` set from the envelope.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let rest = body.strip_prefix(&MAGIC).ok_or(ProtobufError::BadMagic)?;
    let env = decode_unknown(rest)?;
    if !env.content_encoding.is_empty()
        || !(env.content_type.is_empty() || is_protobuf(&env.content_type))
    {
        return Err(ProtobufError::UnsupportedEncoding {
            content_encoding: env.content_encoding,
            content_type: env.content_type,
        });
    }
    let Some(msg) = KINDS
        .iter()
        .find(|(v, k, _)| *v == env.api_version && *k == env.kind)
        .map(|(_, _, m)| *m)
    else {
        return Err(ProtobufError::UnsupportedKind {
            api_version: env.api_version,
            kind: env.kind,
        });
    };
    let body = decode_message(env.raw, msg, 1)?;
    // TypeMeta is inlined first in every object, with `omitempty`.
    let mut out = Map::new();
    out.insert("kind".into(), Value::String(env.kind));
    out.insert("apiVersion".into(), Value::String(env.api_version));
    for (k, v) in body {
        out.insert(k, v);
    }
    Ok(Value::Object(out))
}

// ---------------------------------------------------------------------------
// Wire format

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = *self.buf.get(self.pos).ok_or(ProtobufError::Truncated)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(ProtobufError::VarintOverflow)
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], ProtobufError> {
        let remaining = (self.buf.len() - self.pos) as u64;
        if n > remaining {
            return Err(ProtobufError::Truncated);
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn bytes(&mut self) -> Result<&'a [u8], ProtobufError> {
        let n = self.varint()?;
        self.take(n)
    }

    /// Reads a tag: (field number, wire type).
    fn tag(&mut self) -> Result<(u64, u8), ProtobufError> {
        let tag = self.varint()?;
        let (num, wire) = (tag >> 3, (tag & 7) as u8);
        if num == 0 || num > MAX_FIELD_NUMBER {
            return Err(ProtobufError::InvalidFieldNumber(num));
        }
        Ok((num, wire))
    }

    /// Skips the value of a field with this wire type (nested groups
    /// included, up to [`MAX_DEPTH`] open at once).
    fn skip(&mut self, wire: u8, depth: usize) -> Result<(), ProtobufError> {
        let mut open_groups = 0usize;
        let mut wire = wire;
        loop {
            match wire {
                0 => {
                    self.varint()?;
                }
                1 => {
                    self.take(8)?;
                }
                2 => {
                    self.bytes()?;
                }
                3 => {
                    open_groups += 1;
                    if depth + open_groups > MAX_DEPTH {
                        return Err(ProtobufError::TooDeep);
                    }
                }
                4 => {
                    if open_groups == 0 {
                        return Err(ProtobufError::InvalidWireType(4));
                    }
                    open_groups -= 1;
                }
                5 => {
                    self.take(4)?;
                }
                w => return Err(ProtobufError::InvalidWireType(w)),
            }
            if open_groups == 0 {
                return Ok(());
            }
            wire = self.tag()?.1;
        }
    }
}

struct Envelope<'a> {
    api_version: String,
    kind: String,
    raw: &'a [u8],
    content_encoding: String,
    content_type: String,
}

/// `runtime.Unknown`: 1 typeMeta {1 apiVersion, 2 kind}, 2 raw,
/// 3 contentEncoding, 4 contentType.
fn decode_unknown(buf: &[u8]) -> Result<Envelope<'_>, ProtobufError> {
    let mut env = Envelope {
        api_version: String::new(),
        kind: String::new(),
        raw: &[],
        content_encoding: String::new(),
        content_type: String::new(),
    };
    let mut r = Reader::new(buf);
    while !r.done() {
        let (num, wire) = r.tag()?;
        let expect_bytes = |field: u32| {
            if wire == 2 {
                Ok(())
            } else {
                Err(ProtobufError::WrongWireType {
                    message: "Unknown",
                    field,
                    wire_type: wire,
                })
            }
        };
        match num {
            1 => {
                expect_bytes(1)?;
                let mut tm = Reader::new(r.bytes()?);
                while !tm.done() {
                    let (n, w) = tm.tag()?;
                    match (n, w) {
                        (1, 2) => env.api_version = lossy(tm.bytes()?),
                        (2, 2) => env.kind = lossy(tm.bytes()?),
                        (1 | 2, w) => {
                            return Err(ProtobufError::WrongWireType {
                                message: "TypeMeta",
                                field: n as u32,
                                wire_type: w,
                            })
                        }
                        (_, w) => tm.skip(w, 2)?,
                    }
                }
            }
            2 => {
                expect_bytes(2)?;
                env.raw = r.bytes()?;
            }
            3 => {
                expect_bytes(3)?;
                env.content_encoding = lossy(r.bytes()?);
            }
            4 => {
                expect_bytes(4)?;
                env.content_type = lossy(r.bytes()?);
            }
            _ => r.skip(wire, 1)?,
        }
    }
    Ok(env)
}

/// Go strings carry any bytes; `encoding/json` writes invalid UTF-8 as U+FFFD.
fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// ---------------------------------------------------------------------------
// Schema

/// What a field holds on the wire and how it becomes JSON.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    Bool,
    I32,
    I64,
    Msg(&'static Message),
    /// `metav1.Time`: {1 seconds, 2 nanos}; zero (empty) is `null`.
    Time,
    /// `resource.Quantity`: {1 string}.
    Qty,
    /// `intstr.IntOrString`: {1 type, 2 intVal, 3 strVal}.
    IntStr,
    /// `metav1.FieldsV1`: {1 Raw}, whose bytes are JSON.
    FieldsV1,
    MapStr,
    /// `map[string][]byte`: values base64 in JSON.
    MapBytes,
    MapQty,
}

impl Kind {
    fn is_varint(self) -> bool {
        matches!(self, Kind::Bool | Kind::I32 | Kind::I64)
    }
    fn is_map(self) -> bool {
        matches!(self, Kind::MapStr | Kind::MapBytes | Kind::MapQty)
    }
}

/// How the Go field is declared, which decides when `encoding/json` writes it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Emit {
    /// Non-pointer with `omitempty`: zero scalars and empty slices/maps are
    /// dropped (structs, `Time`, `Quantity`, `IntOrString` are still written:
    /// `omitempty` never omits a struct).
    Omit,
    /// Non-pointer without `omitempty`: always written (nil slice/map: null).
    Always,
    /// Pointer with `omitempty`: written iff set.
    Ptr,
    /// Pointer without `omitempty`: its value if set, else null.
    PtrNull,
    /// Embedded struct (`json:",inline"`): its fields join the parent's.
    Inline,
}

struct Field {
    num: u32,
    json: &'static str,
    kind: Kind,
    emit: Emit,
    repeated: bool,
}

struct Message {
    name: &'static str,
    fields: &'static [Field],
}

const fn f(num: u32, json: &'static str, kind: Kind, emit: Emit) -> Field {
    Field {
        num,
        json,
        kind,
        emit,
        repeated: false,
    }
}

const fn r(num: u32, json: &'static str, kind: Kind, emit: Emit) -> Field {
    Field {
        num,
        json,
        kind,
        emit,
        repeated: true,
    }
}

use Emit::{Always, Inline, Omit, Ptr, PtrNull};
use Kind::{Bool, FieldsV1, IntStr, MapBytes, MapQty, MapStr, Msg, Qty, Str, Time, I32, I64};

static KINDS: &[(&str, &str, &Message)] = &[
    ("v1", "ConfigMap", &CONFIG_MAP),
    ("v1", "Secret", &SECRET),
    ("v1", "Namespace", &NAMESPACE),
    ("v1", "Service", &SERVICE),
    ("v1", "Pod", &POD),
    ("apps/v1", "Deployment", &DEPLOYMENT),
    ("apps/v1", "ReplicaSet", &REPLICA_SET),
    ("networking.k8s.io/v1", "Ingress", &INGRESS),
    // `kubectl auth can-i` and `kubectl auth whoami` (the sim answers them:
    // docs/sim.md#access-reviews). Only what a request carries: a review's
    // status is the server's to fill, and is skipped.
    (
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
        &SELF_SUBJECT_ACCESS_REVIEW,
    ),
    (
        "authentication.k8s.io/v1",
        "SelfSubjectReview",
        &SELF_SUBJECT_REVIEW,
    ),
];

// --- authorization/v1, authentication/v1: the self reviews -----------------

static SELF_SUBJECT_ACCESS_REVIEW: Message = Message {
    name: "SelfSubjectAccessReview",
    fields: &[
        f(1, "metadata", Msg(&OBJECT_META), Omit),
        f(2, "spec", Msg(&SELF_SUBJECT_ACCESS_REVIEW_SPEC), Always),
    ],
};

static SELF_SUBJECT_ACCESS_REVIEW_SPEC: Message = Message {
    name: "SelfSubjectAccessReviewSpec",
    fields: &[
        f(1, "resourceAttributes", Msg(&RESOURCE_ATTRIBUTES), Ptr),
        f(
            2,
            "nonResourceAttributes",
            Msg(&NON_RESOURCE_ATTRIBUTES),
            Ptr,
        ),
    ],
};

static RESOURCE_ATTRIBUTES: Message = Message {
    name: "ResourceAttributes",
    fields: &[
        f(1, "namespace", Str, Omit),
        f(2, "verb", Str, Omit),
        f(3, "group", Str, Omit),
        f(4, "version", Str, Omit),
        f(5, "resource", Str, Omit),
        f(6, "subresource", Str, Omit),
        f(7, "name", Str, Omit),
        f(8, "fieldSelector", Msg(&SELECTOR_ATTRIBUTES), Ptr),
        f(9, "labelSelector", Msg(&SELECTOR_ATTRIBUTES), Ptr),
    ],
};

/// `FieldSelectorAttributes` and `LabelSelectorAttributes`: the same
/// fields, their requirements the same shape as a LabelSelector's.
static SELECTOR_ATTRIBUTES: Message = Message {
    name: "SelectorAttributes",
    fields: &[
        f(1, "rawSelector", Str, Omit),
        r(2, "requirements", Msg(&LABEL_SELECTOR_REQUIREMENT), Omit),
    ],
};

static NON_RESOURCE_ATTRIBUTES: Message = Message {
    name: "NonResourceAttributes",
    fields: &[f(1, "path", Str, Omit), f(2, "verb", Str, Omit)],
};

static SELF_SUBJECT_REVIEW: Message = Message {
    name: "SelfSubjectReview",
    fields: &[f(1, "metadata", Msg(&OBJECT_META), Omit)],
};

// --- meta/v1 (apimachinery pkg/apis/meta/v1/types.go) ----------------------

static OBJECT_META: Message = Message {
    name: "ObjectMeta",
    fields: &[
        f(1, "name", Str, Omit),
        f(2, "generateName", Str, Omit),
        f(3, "namespace", Str, Omit),
        f(4, "selfLink", Str, Omit),
        f(5, "uid", Str, Omit),
        f(6, "resourceVersion", Str, Omit),
        f(7, "generation", I64, Omit),
        f(8, "creationTimestamp", Time, Omit),
        f(9, "deletionTimestamp", Time, Ptr),
        f(10, "deletionGracePeriodSeconds", I64, Ptr),
        f(11, "labels", MapStr, Omit),
        f(12, "annotations", MapStr, Omit),
        r(13, "ownerReferences", Msg(&OWNER_REFERENCE), Omit),
        r(14, "finalizers", Str, Omit),
        r(17, "managedFields", Msg(&MANAGED_FIELDS_ENTRY), Omit),
    ],
};

static OWNER_REFERENCE: Message = Message {
    name: "OwnerReference",
    fields: &[
        f(5, "apiVersion", Str, Always),
        f(1, "kind", Str, Always),
        f(3, "name", Str, Always),
        f(4, "uid", Str, Always),
        f(6, "controller", Bool, Ptr),
        f(7, "blockOwnerDeletion", Bool, Ptr),
    ],
};

static MANAGED_FIELDS_ENTRY: Message = Message {
    name: "ManagedFieldsEntry",
    fields: &[
        f(1, "manager", Str, Omit),
        f(2, "operation", Str, Omit),
        f(3, "apiVersion", Str, Omit),
        f(4, "time", Time, Ptr),
        f(6, "fieldsType", Str, Omit),
        f(7, "fieldsV1", FieldsV1, Ptr),
        f(8, "subresource", Str, Omit),
    ],
};

static LABEL_SELECTOR: Message = Message {
    name: "LabelSelector",
    fields: &[
        f(1, "matchLabels", MapStr, Omit),
        r(
            2,
            "matchExpressions",
            Msg(&LABEL_SELECTOR_REQUIREMENT),
            Omit,
        ),
    ],
};

static LABEL_SELECTOR_REQUIREMENT: Message = Message {
    name: "LabelSelectorRequirement",
    fields: &[
        f(1, "key", Str, Always),
        f(2, "operator", Str, Always),
        r(3, "values", Str, Omit),
    ],
};

static CONDITION: Message = Message {
    name: "Condition",
    fields: &[
        f(1, "type", Str, Always),
        f(2, "status", Str, Always),
        f(3, "observedGeneration", I64, Omit),
        f(4, "lastTransitionTime", Time, Always),
        f(5, "reason", Str, Always),
        f(6, "message", Str, Always),
    ],
};

// --- core/v1: ConfigMap, Secret, Namespace ---------------------------------

static CONFIG_MAP: Message = Message {
    name: "ConfigMap",
    fields: &[
        f(1, "metadata", Msg(&OBJECT_META), Omit),
        f(4, "immutable", Bool, Ptr),
        f(2, "data", MapStr, Omit),
        f(3, "binaryData", MapBytes, Omit),
    ],
};

static SECRET: Message = Message {
    name: "Secret",
    fields: &[
        f(1, "metadata", Msg(&OBJECT_META), Omit),
        f(5, "immutable", Bool, Ptr),
        f(2, "data", MapBytes, Omit),
        f(4, "stringData", MapStr, Omit),
        f(3, "type", Str, Omit),
    ],
};

static NAMESPACE: Message = Message {
    name: "Namespace",
    fields: &[
        f(1, "metadata", Msg(&OBJECT_META), Omit),
        f(2, "spec", Msg(&NAMESPACE_SPEC), Omit),
        f(3, "status", Msg(&NAMESPACE_STATUS), Omit),
    ],
};

static NAMESPACE_SPEC: Message = Message {
    name: "NamespaceSpec",
    fields: &[r(1, "finalizers", Str, Omit)],
};

static NAMESPACE_STATUS: Message = Message {
    name: "NamespaceStatus",
    fields: &[
        f(1, "phase", Str, Omit),
        r(2, "conditions", Msg(&NAMESPACE_CONDITION), Omit),
    ],
};

static NAMESPACE_CONDITION: Message = Message {
    name: "NamespaceCondition",
    fields: &[
        f(1, "type", Str, Always),
        f(2, "status", Str, Always),
        f(4, "lastTransitionTime", Time, Omit),
        f(5, "reason", Str, Omit),
        f(6, "message", Str, Omit),
    ],
};

// --- core/v1: Service -------------------------------------------------------

static SERVICE: Message = Message {
    name: "Service",
    fields: &[
        f(1, "metadata", Msg(&OBJECT_META), Omit),
        f(2, "spec", Msg(&SERVICE_SPEC), Omit),
        f(3, "status", Msg(&SERVICE_STATUS), Omit),
    ],
};

static SERVICE_SPEC: Message = Message {
    name: "ServiceSpec",
    fields: &[
        r(1, "ports", Msg(&SERVICE_PORT), Omit),
        f(2, "selector", MapStr, Omit),
        f(3, "clusterIP", Str, Omit),
        r(18, "clusterIPs", Str, Omit),
        f(4, "type", Str, Omit),
        r(5, "externalIPs", Str, Omit),
        f(7, "sessionAffinity", Str, Omit),
        f(8, "loadBalancerIP", Str, Omit),
        r(9, "loadBalancerSourceRanges", Str, Omit),
        f(10, "externalName", Str, Omit),
        f(11, "externalTrafficPolicy", Str, Omit),
        f(12, "healthCheckNodePort", I32, Omit),
        f(13, "publishNotReadyAddresses", Bool, Omit),
        f(
            14,
            "sessionAffinityConfig",
            Msg(&SESSION_AFFINITY_CONFIG),
            Ptr,
        ),
        r(19, "ipFamilies", Str, Omit),
        f(17, "ipFamilyPolicy", Str, Ptr),
        f(20, "allocateLoadBalancerNodePorts", Bool, Ptr),
        f(21, "loadBalancerClass", Str, Ptr),
        f(22, "internalTrafficPolicy", Str, Ptr),
        f(23, "trafficDistribution", Str, Ptr),
    ],
};

static SESSION_AFFINITY_CONFIG: Message = Message {
    name: "SessionAffinityConfig",
    fields: &[f(1, "clientIP", Msg(&CLIENT_IP_CONFIG), Ptr)],
};

static CLIENT_IP_CONFIG: Message = Message {
    name: "ClientIPConfig",
    fields: &[f(1, "timeoutSeconds", I32, Ptr)],
};

static SERVICE_PORT: Message = Message {
    name: "ServicePort",
    fields: &[
        f(1, "name", Str, Omit),
        f(2, "protocol", Str, Omit),
        f(6, "appProtocol", Str, Ptr),
        f(3, "port", I32, Always),
        f(4, "targetPort", IntStr, Omit),
        f(5, "nodePort", I32, Omit),
    ],
};

static SERVICE_STATUS: Message = Message {
    name: "ServiceStatus",
    fields: &[
        f(1, "loadBalancer", Msg(&LOAD_BALANCER_STATUS), Omit),
        r(2, "conditions", Msg(&CONDITION), Omit),
    ],
};

static LOAD_BALANCER_STATUS: Message = Message {
    name: "LoadBalancerStatus",
    fields: &[r(1, "ingress", Msg(&LOAD_BALANCER_INGRESS), Omit)],
};

static LOAD_BALANCER_INGRESS: Message = Message {
    name: "LoadBalancerIngress",
    fields: &[
        f(1, "ip", Str, Omit),
        f(2, "hostname", Str, Omit),
        f(3, "ipMode", Str, Ptr),
        r(4, "ports", Msg(&PORT_STATUS), Omit),
    ],
};

static PORT_STATUS: Message = Message {
    name: "PortStatus",
    fields: &[
        f(1, "port", I32, Always),
        f(2, "protocol", Str, Always),
        f(3, "error", Str, Ptr),
    ],
};

// --- core/v1: Pod, PodTemplateSpec, PodSpec --------------------------------

static POD: Message = Message {
    name: "Pod",
    fields: &[
        f(1, "metadata", Msg(&OBJECT_META), Omit),
        f(2, "spec", Msg(&POD_SPEC), Omit),
        f(3, "status", Msg(&POD_STATUS), Omit),
    ],
};

/// Pod status as a create body carries it: kept minimal (phase, messages,
/// IPs); the sim owns status. Other fields are skipped as unknown.
static POD_STATUS: Message = Message {
    name: "PodStatus",
    fields: &[
        f(1, "phase", Str, Omit),
        f(3, "message", Str, Omit),
        f(4, "reason", Str, Omit),
        f(11, "nominatedNodeName", Str, Omit),
        f(5, "hostIP", Str, Omit),
        f(6, "podIP", Str, Omit),
        f(7, "startTime", Time, Ptr),
        f(9, "qosClass", Str, Omit),
    ],
};

static POD_TEMPLATE_SPEC: Message = Message {
    name: "PodTemplateSpec",
    fields: &[
        f(1, "metadata", Msg(&OBJECT_META), Omit),
        f(2, "spec", Msg(&POD_SPEC), Omit),
    ],
};

static POD_SPEC: Message = Message {
    name: "PodSpec",
    fields: &[
        r(1, "volumes", Msg(&VOLUME), Omit),
        r(20, "initContainers", Msg(&CONTAINER), Omit),
        r(2, "containers", Msg(&CONTAINER), Always),
        r(34, "ephemeralContainers", Msg(&EPHEMERAL_CONTAINER), Omit),
        f(3, "restartPolicy", Str, Omit),
        f(4, "terminationGracePeriodSeconds", I64, Ptr),
        f(5, "activeDeadlineSeconds", I64, Ptr),
        f(6, "dnsPolicy", Str, Omit),
        f(7, "nodeSelector", MapStr, Omit),
        f(8, "serviceAccountName", Str, Omit),
        f(9, "serviceAccount", Str, Omit),
        f(21, "automountServiceAccountToken", Bool, Ptr),
        f(10, "nodeName", Str, Omit),
        f(11, "hostNetwork", Bool, Omit),
        f(12, "hostPID", Bool, Omit),
        f(13, "hostIPC", Bool, Omit),
        f(27, "shareProcessNamespace", Bool, Ptr),
        f(14, "securityContext", Msg(&POD_SECURITY_CONTEXT), Ptr),
        r(15, "imagePullSecrets", Msg(&LOCAL_OBJECT_REFERENCE), Omit),
        f(16, "hostname", Str, Omit),
        f(17, "subdomain", Str, Omit),
        f(18, "affinity", Msg(&AFFINITY), Ptr),
        f(19, "schedulerName", Str, Omit),
        r(22, "tolerations", Msg(&TOLERATION), Omit),
        r(23, "hostAliases", Msg(&HOST_ALIAS), Omit),
        f(24, "priorityClassName", Str, Omit),
        f(25, "priority", I32, Ptr),
        f(26, "dnsConfig", Msg(&POD_DNS_CONFIG), Ptr),
        r(28, "readinessGates", Msg(&POD_READINESS_GATE), Omit),
        f(29, "runtimeClassName", Str, Ptr),
        f(30, "enableServiceLinks", Bool, Ptr),
        f(31, "preemptionPolicy", Str, Ptr),
        f(32, "overhead", MapQty, Omit),
        r(
            33,
            "topologySpreadConstraints",
            Msg(&TOPOLOGY_SPREAD_CONSTRAINT),
            Omit,
        ),
        f(35, "setHostnameAsFQDN", Bool, Ptr),
        f(36, "os", Msg(&POD_OS), Ptr),
        f(37, "hostUsers", Bool, Ptr),
        r(38, "schedulingGates", Msg(&NAME_ONLY), Omit),
        r(39, "resourceClaims", Msg(&POD_RESOURCE_CLAIM), Omit),
        f(40, "resources", Msg(&RESOURCE_REQUIREMENTS), Ptr),
        f(41, "hostnameOverride", Str, Ptr),
    ],
};

/// PodSchedulingGate, PodOS: `name` without omitempty.
static NAME_ONLY: Message = Message {
    name: "PodSchedulingGate",
    fields: &[f(1, "name", Str, Always)],
};

static POD_OS: Message = Message {
    name: "PodOS",
    fields: &[f(1, "name", Str, Always)],
};

static POD_RESOURCE_CLAIM: Message = Message {
    name: "PodResourceClaim",
    fields: &[
        f(1, "name", Str, Always),
        f(3, "resourceClaimName", Str, Ptr),
        f(4, "resourceClaimTemplateName", Str, Ptr),
    ],
};

static POD_READINESS_GATE: Message = Message {
    name: "PodReadinessGate",
    fields: &[f(1, "conditionType", Str, Always)],
};

static HOST_ALIAS: Message = Message {
    name: "HostAlias",
    fields: &[f(1, "ip", Str, Omit), r(2, "hostnames", Str, Omit)],
};

static POD_DNS_CONFIG: Message = Message {
    name: "PodDNSConfig",
    fields: &[
        r(1, "nameservers", Str, Omit),
        r(2, "searches", Str, Omit),
        r(3, "options", Msg(&POD_DNS_CONFIG_OPTION), Omit),
    ],
};

static POD_DNS_CONFIG_OPTION: Message = Message {
    name: "PodDNSConfigOption",
    fields: &[f(1, "name", Str, Omit), f(2, "value", Str, Ptr)],
};

static TOPOLOGY_SPREAD_CONSTRAINT: Message = Message {
    name: "TopologySpreadConstraint",
    fields: &[
        f(1, "maxSkew", I32, Always),
        f(2, "topologyKey", Str, Always),
        f(3, "whenUnsatisfiable", Str, Always),
        f(4, "labelSelector", Msg(&LABEL_SELECTOR), Ptr),
        f(5, "minDomains", I32, Ptr),
        f(6, "nodeAffinityPolicy", Str, Ptr),
        f(7, "nodeTaintsPolicy", Str, Ptr),
        r(8, "matchLabelKeys", Str, Omit),
    ],
};

static TOLERATION: Message = Message {
    name: "Toleration",
    fields: &[
        f(1, "key", Str, Omit),
        f(2, "operator", Str, Omit),
        f(3, "value", Str, Omit),
        f(4, "effect", Str, Omit),
        f(5, "tolerationSeconds", I64, Ptr),
    ],
};

static LOCAL_OBJECT_REFERENCE: Message = Message {
    name: "LocalObjectReference",
    fields: &[f(1, "name", Str, Omit)],
};

static AFFINITY: Message = Message {
    name: "Affinity",
    fields: &[
        f(1, "nodeAffinity", Msg(&NODE_AFFINITY), Ptr),
        f(2, "podAffinity", Msg(&POD_AFFINITY), Ptr),
        f(3, "podAntiAffinity", Msg(&POD_AFFINITY), Ptr),
    ],
};

static NODE_AFFINITY: Message = Message {
    name: "NodeAffinity",
    fields: &[
        f(
            1,
            "requiredDuringSchedulingIgnoredDuringExecution",
            Msg(&NODE_SELECTOR),
            Ptr,
        ),
        r(
            2,
            "preferredDuringSchedulingIgnoredDuringExecution",
            Msg(&PREFERRED_SCHEDULING_TERM),
            Omit,
        ),
    ],
};

static NODE_SELECTOR: Message = Message {
    name: "NodeSelector",
    fields: &[r(1, "nodeSelectorTerms", Msg(&NODE_SELECTOR_TERM), Always)],
};

static NODE_SELECTOR_TERM: Message = Message {
    name: "NodeSelectorTerm",
    fields: &[
        r(1, "matchExpressions", Msg(&NODE_SELECTOR_REQUIREMENT), Omit),
        r(2, "matchFields", Msg(&NODE_SELECTOR_REQUIREMENT), Omit),
    ],
};

static NODE_SELECTOR_REQUIREMENT: Message = Message {
    name: "NodeSelectorRequirement",
    fields: &[
        f(1, "key", Str, Always),
        f(2, "operator", Str, Always),
        r(3, "values", Str, Omit),
    ],
};

static PREFERRED_SCHEDULING_TERM: Message = Message {
    name: "PreferredSchedulingTerm",
    fields: &[
        f(1, "weight", I32, Always),
        f(2, "preference", Msg(&NODE_SELECTOR_TERM), Always),
    ],
};

/// PodAffinity and PodAntiAffinity have the same fields.
static POD_AFFINITY: Message = Message {
    name: "PodAffinity",
    fields: &[
        r(
            1,
            "requiredDuringSchedulingIgnoredDuringExecution",
            Msg(&POD_AFFINITY_TERM),
            Omit,
        ),
        r(
            2,
            "preferredDuringSchedulingIgnoredDuringExecution",
            Msg(&WEIGHTED_POD_AFFINITY_TERM),
            Omit,
        ),
    ],
};

static WEIGHTED_POD_AFFINITY_TERM: Message = Message {
    name: "WeightedPodAffinityTerm",
    fields: &[
        f(1, "weight", I32, Always),
        f(2, "podAffinityTerm", Msg(&POD_AFFINITY_TERM), Always),
    ],
};

static POD_AFFINITY_TERM: Message = Message {
    name: "PodAffinityTerm",
    fields: &[
        f(1, "labelSelector", Msg(&LABEL_SELECTOR), Ptr),
        r(2, "namespaces", Str, Omit),
        f(3, "topologyKey", Str, Always),
        f(4, "namespaceSelector", Msg(&LABEL_SELECTOR), Ptr),
        r(5, "matchLabelKeys", Str, Omit),
        r(6, "mismatchLabelKeys", Str, Omit),
    ],
};

static POD_SECURITY_CONTEXT: Message = Message {
    name: "PodSecurityContext",
    fields: &[
        f(1, "seLinuxOptions", Msg(&SE_LINUX_OPTIONS), Ptr),
        f(
            8,
            "windowsOptions",
            Msg(&WINDOWS_SECURITY_CONTEXT_OPTIONS),
            Ptr,
        ),
        f(2, "runAsUser", I64, Ptr),
        f(6, "runAsGroup", I64, Ptr),
        f(3, "runAsNonRoot", Bool, Ptr),
        r(4, "supplementalGroups", I64, Omit),
        f(12, "supplementalGroupsPolicy", Str, Ptr),
        f(5, "fsGroup", I64, Ptr),
        r(7, "sysctls", Msg(&SYSCTL), Omit),
        f(9, "fsGroupChangePolicy", Str, Ptr),
        f(10, "seccompProfile", Msg(&SECCOMP_PROFILE), Ptr),
        f(13, "seLinuxChangePolicy", Str, Ptr),
    ],
};

static SECURITY_CONTEXT: Message = Message {
    name: "SecurityContext",
    fields: &[
        f(1, "capabilities", Msg(&CAPABILITIES), Ptr),
        f(2, "privileged", Bool, Ptr),
        f(3, "seLinuxOptions", Msg(&SE_LINUX_OPTIONS), Ptr),
        f(
            10,
            "windowsOptions",
            Msg(&WINDOWS_SECURITY_CONTEXT_OPTIONS),
            Ptr,
        ),
        f(4, "runAsUser", I64, Ptr),
        f(8, "runAsGroup", I64, Ptr),
        f(5, "runAsNonRoot", Bool, Ptr),
        f(6, "readOnlyRootFilesystem", Bool, Ptr),
        f(7, "allowPrivilegeEscalation", Bool, Ptr),
        f(9, "procMount", Str, Ptr),
        f(11, "seccompProfile", Msg(&SECCOMP_PROFILE), Ptr),
    ],
};

static CAPABILITIES: Message = Message {
    name: "Capabilities",
    fields: &[r(1, "add", Str, Omit), r(2, "drop", Str, Omit)],
};

static SE_LINUX_OPTIONS: Message = Message {
    name: "SELinuxOptions",
    fields: &[
        f(1, "user", Str, Omit),
        f(2, "role", Str, Omit),
        f(3, "type", Str, Omit),
        f(4, "level", Str, Omit),
    ],
};

static WINDOWS_SECURITY_CONTEXT_OPTIONS: Message = Message {
    name: "WindowsSecurityContextOptions",
    fields: &[
        f(1, "gmsaCredentialSpecName", Str, Ptr),
        f(2, "gmsaCredentialSpec", Str, Ptr),
        f(3, "runAsUserName", Str, Ptr),
        f(4, "hostProcess", Bool, Ptr),
    ],
};

static SECCOMP_PROFILE: Message = Message {
    name: "SeccompProfile",
    fields: &[
        f(1, "type", Str, Always),
        f(2, "localhostProfile", Str, Ptr),
    ],
};

static SYSCTL: Message = Message {
    name: "Sysctl",
    fields: &[f(1, "name", Str, Always), f(2, "value", Str, Always)],
};

// --- core/v1: Container and friends ----------------------------------------

/// Container; also EphemeralContainerCommon, which upstream keeps
/// field-for-field identical (`var _ = Container(EphemeralContainerCommon{})`).
static CONTAINER: Message = Message {
    name: "Container",
    fields: &[
        f(1, "name", Str, Always),
        f(2, "image", Str, Omit),
        r(3, "command", Str, Omit),
        r(4, "args", Str, Omit),
        f(5, "workingDir", Str, Omit),
        r(6, "ports", Msg(&CONTAINER_PORT), Omit),
        r(19, "envFrom", Msg(&ENV_FROM_SOURCE), Omit),
        r(7, "env", Msg(&ENV_VAR), Omit),
        f(8, "resources", Msg(&RESOURCE_REQUIREMENTS), Omit),
        r(23, "resizePolicy", Msg(&CONTAINER_RESIZE_POLICY), Omit),
        f(24, "restartPolicy", Str, Ptr),
        r(9, "volumeMounts", Msg(&VOLUME_MOUNT), Omit),
        r(21, "volumeDevices", Msg(&VOLUME_DEVICE), Omit),
        f(10, "livenessProbe", Msg(&PROBE), Ptr),
        f(11, "readinessProbe", Msg(&PROBE), Ptr),
        f(22, "startupProbe", Msg(&PROBE), Ptr),
        f(12, "lifecycle", Msg(&LIFECYCLE), Ptr),
        f(13, "terminationMessagePath", Str, Omit),
        f(20, "terminationMessagePolicy", Str, Omit),
        f(14, "imagePullPolicy", Str, Omit),
        f(15, "securityContext", Msg(&SECURITY_CONTEXT), Ptr),
        f(16, "stdin", Bool, Omit),
        f(17, "stdinOnce", Bool, Omit),
        f(18, "tty", Bool, Omit),
    ],
};

static EPHEMERAL_CONTAINER: Message = Message {
    name: "EphemeralContainer",
    fields: &[
        f(1, "ephemeralContainerCommon", Msg(&CONTAINER), Inline),
        f(2, "targetContainerName", Str, Omit),
    ],
};

static CONTAINER_PORT: Message = Message {
    name: "ContainerPort",
    fields: &[
        f(1, "name", Str, Omit),
        f(2, "hostPort", I32, Omit),
        f(3, "containerPort", I32, Always),
        f(4, "protocol", Str, Omit),
        f(5, "hostIP", Str, Omit),
    ],
};

static CONTAINER_RESIZE_POLICY: Message = Message {
    name: "ContainerResizePolicy",
    fields: &[
        f(1, "resourceName", Str, Always),
        f(2, "restartPolicy", Str, Always),
    ],
};

static VOLUME_DEVICE: Message = Message {
    name: "VolumeDevice",
    fields: &[f(1, "name", Str, Always), f(2, "devicePath", Str, Always)],
};

static ENV_VAR: Message = Message {
    name: "EnvVar",
    fields: &[
        f(1, "name", Str, Always),
        f(2, "value", Str, Omit),
        f(3, "valueFrom", Msg(&ENV_VAR_SOURCE), Ptr),
    ],
};

static ENV_VAR_SOURCE: Message = Message {
    name: "EnvVarSource",
    fields: &[
        f(1, "fieldRef", Msg(&OBJECT_FIELD_SELECTOR), Ptr),
        f(2, "resourceFieldRef", Msg(&RESOURCE_FIELD_SELECTOR), Ptr),
        f(3, "configMapKeyRef", Msg(&KEY_SELECTOR), Ptr),
        f(4, "secretKeyRef", Msg(&KEY_SELECTOR), Ptr),
    ],
};

static OBJECT_FIELD_SELECTOR: Message = Message {
    name: "ObjectFieldSelector",
    fields: &[
        f(1, "apiVersion", Str, Omit),
        f(2, "fieldPath", Str, Always),
    ],
};

static RESOURCE_FIELD_SELECTOR: Message = Message {
    name: "ResourceFieldSelector",
    fields: &[
        f(1, "containerName", Str, Omit),
        f(2, "resource", Str, Always),
        f(3, "divisor", Qty, Omit),
    ],
};

/// ConfigMapKeySelector and SecretKeySelector have the same fields.
static KEY_SELECTOR: Message = Message {
    name: "KeySelector",
    fields: &[
        f(
            1,
            "localObjectReference",
            Msg(&LOCAL_OBJECT_REFERENCE),
            Inline,
        ),
        f(2, "key", Str, Always),
        f(3, "optional", Bool, Ptr),
    ],
};

static ENV_FROM_SOURCE: Message = Message {
    name: "EnvFromSource",
    fields: &[
        f(1, "prefix", Str, Omit),
        f(2, "configMapRef", Msg(&ENV_SOURCE), Ptr),
        f(3, "secretRef", Msg(&ENV_SOURCE), Ptr),
    ],
};

/// ConfigMapEnvSource and SecretEnvSource have the same fields.
static ENV_SOURCE: Message = Message {
    name: "EnvSource",
    fields: &[
        f(
            1,
            "localObjectReference",
            Msg(&LOCAL_OBJECT_REFERENCE),
            Inline,
        ),
        f(2, "optional", Bool, Ptr),
    ],
};

static RESOURCE_REQUIREMENTS: Message = Message {
    name: "ResourceRequirements",
    fields: &[
        f(1, "limits", MapQty, Omit),
        f(2, "requests", MapQty, Omit),
        r(3, "claims", Msg(&RESOURCE_CLAIM), Omit),
    ],
};

static RESOURCE_CLAIM: Message = Message {
    name: "ResourceClaim",
    fields: &[f(1, "name", Str, Always), f(2, "request", Str, Omit)],
};

static VOLUME_MOUNT: Message = Message {
    name: "VolumeMount",
    fields: &[
        f(1, "name", Str, Always),
        f(2, "readOnly", Bool, Omit),
        f(7, "recursiveReadOnly", Str, Ptr),
        f(3, "mountPath", Str, Always),
        f(4, "subPath", Str, Omit),
        f(5, "mountPropagation", Str, Ptr),
        f(6, "subPathExpr", Str, Omit),
    ],
};

static PROBE: Message = Message {
    name: "Probe",
    fields: &[
        f(1, "handler", Msg(&PROBE_HANDLER), Inline),
        f(2, "initialDelaySeconds", I32, Omit),
        f(3, "timeoutSeconds", I32, Omit),
        f(4, "periodSeconds", I32, Omit),
        f(5, "successThreshold", I32, Omit),
        f(6, "failureThreshold", I32, Omit),
        f(7, "terminationGracePeriodSeconds", I64, Ptr),
    ],
};

static PROBE_HANDLER: Message = Message {
    name: "ProbeHandler",
    fields: &[
        f(1, "exec", Msg(&EXEC_ACTION), Ptr),
        f(2, "httpGet", Msg(&HTTP_GET_ACTION), Ptr),
        f(3, "tcpSocket", Msg(&TCP_SOCKET_ACTION), Ptr),
        f(4, "grpc", Msg(&GRPC_ACTION), Ptr),
    ],
};

static EXEC_ACTION: Message = Message {
    name: "ExecAction",
    fields: &[r(1, "command", Str, Omit)],
};

static HTTP_GET_ACTION: Message = Message {
    name: "HTTPGetAction",
    fields: &[
        f(1, "path", Str, Omit),
        f(2, "port", IntStr, Always),
        f(3, "host", Str, Omit),
        f(4, "scheme", Str, Omit),
        r(5, "httpHeaders", Msg(&HTTP_HEADER), Omit),
    ],
};

static HTTP_HEADER: Message = Message {
    name: "HTTPHeader",
    fields: &[f(1, "name", Str, Always), f(2, "value", Str, Always)],
};

static TCP_SOCKET_ACTION: Message = Message {
    name: "TCPSocketAction",
    fields: &[f(1, "port", IntStr, Always), f(2, "host", Str, Omit)],
};

static GRPC_ACTION: Message = Message {
    name: "GRPCAction",
    fields: &[f(1, "port", I32, Always), f(2, "service", Str, PtrNull)],
};

static LIFECYCLE: Message = Message {
    name: "Lifecycle",
    fields: &[
        f(1, "postStart", Msg(&LIFECYCLE_HANDLER), Ptr),
        f(2, "preStop", Msg(&LIFECYCLE_HANDLER), Ptr),
        f(3, "stopSignal", Str, Ptr),
    ],
};

static LIFECYCLE_HANDLER: Message = Message {
    name: "LifecycleHandler",
    fields: &[
        f(1, "exec", Msg(&EXEC_ACTION), Ptr),
        f(2, "httpGet", Msg(&HTTP_GET_ACTION), Ptr),
        f(3, "tcpSocket", Msg(&TCP_SOCKET_ACTION), Ptr),
        f(4, "sleep", Msg(&SLEEP_ACTION), Ptr),
    ],
};

static SLEEP_ACTION: Message = Message {
    name: "SleepAction",
    fields: &[f(1, "seconds", I64, Always)],
};

// --- core/v1: volumes -------------------------------------------------------

static VOLUME: Message = Message {
    name: "Volume",
    fields: &[
        f(1, "name", Str, Always),
        f(2, "volumeSource", Msg(&VOLUME_SOURCE), Inline),
    ],
};

/// The volume sources the sim can back; cloud and legacy in-tree sources
/// are skipped as unknown fields.
static VOLUME_SOURCE: Message = Message {
    name: "VolumeSource",
    fields: &[
        f(1, "hostPath", Msg(&HOST_PATH_VOLUME_SOURCE), Ptr),
        f(2, "emptyDir", Msg(&EMPTY_DIR_VOLUME_SOURCE), Ptr),
        f(6, "secret", Msg(&SECRET_VOLUME_SOURCE), Ptr),
        f(10, "persistentVolumeClaim", Msg(&PVC_VOLUME_SOURCE), Ptr),
        f(16, "downwardAPI", Msg(&DOWNWARD_API_VOLUME_SOURCE), Ptr),
        f(19, "configMap", Msg(&CONFIG_MAP_VOLUME_SOURCE), Ptr),
        f(26, "projected", Msg(&PROJECTED_VOLUME_SOURCE), Ptr),
    ],
};

static HOST_PATH_VOLUME_SOURCE: Message = Message {
    name: "HostPathVolumeSource",
    fields: &[f(1, "path", Str, Always), f(2, "type", Str, Ptr)],
};

static EMPTY_DIR_VOLUME_SOURCE: Message = Message {
    name: "EmptyDirVolumeSource",
    fields: &[f(1, "medium", Str, Omit), f(2, "sizeLimit", Qty, Ptr)],
};

static SECRET_VOLUME_SOURCE: Message = Message {
    name: "SecretVolumeSource",
    fields: &[
        f(1, "secretName", Str, Omit),
        r(2, "items", Msg(&KEY_TO_PATH), Omit),
        f(3, "defaultMode", I32, Ptr),
        f(4, "optional", Bool, Ptr),
    ],
};

static CONFIG_MAP_VOLUME_SOURCE: Message = Message {
    name: "ConfigMapVolumeSource",
    fields: &[
        f(
            1,
            "localObjectReference",
            Msg(&LOCAL_OBJECT_REFERENCE),
            Inline,
        ),
        r(2, "items", Msg(&KEY_TO_PATH), Omit),
        f(3, "defaultMode", I32, Ptr),
        f(4, "optional", Bool, Ptr),
    ],
};

static KEY_TO_PATH: Message = Message {
    name: "KeyToPath",
    fields: &[
        f(1, "key", Str, Always),
        f(2, "path", Str, Always),
        f(3, "mode", I32, Ptr),
    ],
};

static PVC_VOLUME_SOURCE: Message = Message {
    name: "PersistentVolumeClaimVolumeSource",
    fields: &[f(1, "claimName", Str, Always), f(2, "readOnly", Bool, Omit)],
};

static DOWNWARD_API_VOLUME_SOURCE: Message = Message {
    name: "DownwardAPIVolumeSource",
    fields: &[
        r(1, "items", Msg(&DOWNWARD_API_VOLUME_FILE), Omit),
        f(2, "defaultMode", I32, Ptr),
    ],
};

static DOWNWARD_API_VOLUME_FILE: Message = Message {
    name: "DownwardAPIVolumeFile",
    fields: &[
        f(1, "path", Str, Always),
        f(2, "fieldRef", Msg(&OBJECT_FIELD_SELECTOR), Ptr),
        f(3, "resourceFieldRef", Msg(&RESOURCE_FIELD_SELECTOR), Ptr),
        f(4, "mode", I32, Ptr),
    ],
};

static PROJECTED_VOLUME_SOURCE: Message = Message {
    name: "ProjectedVolumeSource",
    fields: &[
        r(1, "sources", Msg(&VOLUME_PROJECTION), Always),
        f(2, "defaultMode", I32, Ptr),
    ],
};

static VOLUME_PROJECTION: Message = Message {
    name: "VolumeProjection",
    fields: &[
        f(1, "secret", Msg(&KEY_PROJECTION), Ptr),
        f(2, "downwardAPI", Msg(&DOWNWARD_API_PROJECTION), Ptr),
        f(3, "configMap", Msg(&KEY_PROJECTION), Ptr),
        f(
            4,
            "serviceAccountToken",
            Msg(&SERVICE_ACCOUNT_TOKEN_PROJECTION),
            Ptr,
        ),
    ],
};

/// SecretProjection and ConfigMapProjection have the same fields.
static KEY_PROJECTION: Message = Message {
    name: "KeyProjection",
    fields: &[
        f(
            1,
            "localObjectReference",
            Msg(&LOCAL_OBJECT_REFERENCE),
            Inline,
        ),
        r(2, "items", Msg(&KEY_TO_PATH), Omit),
        f(4, "optional", Bool, Ptr),
    ],
};

static DOWNWARD_API_PROJECTION: Message = Message {
    name: "DownwardAPIProjection",
    fields: &[r(1, "items", Msg(&DOWNWARD_API_VOLUME_FILE), Omit)],
};

static SERVICE_ACCOUNT_TOKEN_PROJECTION: Message = Message {
    name: "ServiceAccountTokenProjection",
    fields: &[
        f(1, "audience", Str, Omit),
        f(2, "expirationSeconds", I64, Ptr),
        f(3, "path", Str, Always),
    ],
};

// --- apps/v1 ----------------------------------------------------------------

static DEPLOYMENT: Message = Message {
    name: "Deployment",
    fields: &[
        f(1, "metadata", Msg(&OBJECT_META), Omit),
        f(2, "spec", Msg(&DEPLOYMENT_SPEC), Omit),
        f(3, "status", Msg(&DEPLOYMENT_STATUS), Omit),
    ],
};

static DEPLOYMENT_SPEC: Message = Message {
    name: "DeploymentSpec",
    fields: &[
        f(1, "replicas", I32, Ptr),
        f(2, "selector", Msg(&LABEL_SELECTOR), PtrNull),
        f(3, "template", Msg(&POD_TEMPLATE_SPEC), Always),
        f(4, "strategy", Msg(&DEPLOYMENT_STRATEGY), Omit),
        f(5, "minReadySeconds", I32, Omit),
        f(6, "revisionHistoryLimit", I32, Ptr),
        f(7, "paused", Bool, Omit),
        f(9, "progressDeadlineSeconds", I32, Ptr),
        f(10, "podReplacementPolicy", Str, Ptr),
    ],
};

static DEPLOYMENT_STRATEGY: Message = Message {
    name: "DeploymentStrategy",
    fields: &[
        f(1, "type", Str, Omit),
        f(2, "rollingUpdate", Msg(&ROLLING_UPDATE_DEPLOYMENT), Ptr),
    ],
};

static ROLLING_UPDATE_DEPLOYMENT: Message = Message {
    name: "RollingUpdateDeployment",
    fields: &[
        f(1, "maxUnavailable", IntStr, Ptr),
        f(2, "maxSurge", IntStr, Ptr),
    ],
};

static DEPLOYMENT_STATUS: Message = Message {
    name: "DeploymentStatus",
    fields: &[
        f(1, "observedGeneration", I64, Omit),
        f(2, "replicas", I32, Omit),
        f(3, "updatedReplicas", I32, Omit),
        f(7, "readyReplicas", I32, Omit),
        f(4, "availableReplicas", I32, Omit),
        f(5, "unavailableReplicas", I32, Omit),
        f(9, "terminatingReplicas", I32, Ptr),
        r(6, "conditions", Msg(&DEPLOYMENT_CONDITION), Omit),
        f(8, "collisionCount", I32, Ptr),
    ],
};

static DEPLOYMENT_CONDITION: Message = Message {
    name: "DeploymentCondition",
    fields: &[
        f(1, "type", Str, Always),
        f(2, "status", Str, Always),
        f(6, "lastUpdateTime", Time, Omit),
        f(7, "lastTransitionTime", Time, Omit),
        f(4, "reason", Str, Omit),
        f(5, "message", Str, Omit),
    ],
};

static REPLICA_SET: Message = Message {
    name: "ReplicaSet",
    fields: &[
        f(1, "metadata", Msg(&OBJECT_META), Omit),
        f(2, "spec", Msg(&REPLICA_SET_SPEC), Omit),
        f(3, "status", Msg(&REPLICA_SET_STATUS), Omit),
    ],
};

static REPLICA_SET_SPEC: Message = Message {
    name: "ReplicaSetSpec",
    fields: &[
        f(1, "replicas", I32, Ptr),
        f(4, "minReadySeconds", I32, Omit),
        f(2, "selector", Msg(&LABEL_SELECTOR), PtrNull),
        f(3, "template", Msg(&POD_TEMPLATE_SPEC), Omit),
    ],
};

static REPLICA_SET_STATUS: Message = Message {
    name: "ReplicaSetStatus",
    fields: &[
        f(1, "replicas", I32, Always),
        f(2, "fullyLabeledReplicas", I32, Omit),
        f(4, "readyReplicas", I32, Omit),
        f(5, "availableReplicas", I32, Omit),
        f(7, "terminatingReplicas", I32, Ptr),
        f(3, "observedGeneration", I64, Omit),
        r(6, "conditions", Msg(&REPLICA_SET_CONDITION), Omit),
    ],
};

static REPLICA_SET_CONDITION: Message = Message {
    name: "ReplicaSetCondition",
    fields: &[
        f(1, "type", Str, Always),
        f(2, "status", Str, Always),
        f(3, "lastTransitionTime", Time, Omit),
        f(4, "reason", Str, Omit),
        f(5, "message", Str, Omit),
    ],
};

// --- networking/v1 ----------------------------------------------------------

static INGRESS: Message = Message {
    name: "Ingress",
    fields: &[
        f(1, "metadata", Msg(&OBJECT_META), Omit),
        f(2, "spec", Msg(&INGRESS_SPEC), Omit),
        f(3, "status", Msg(&INGRESS_STATUS), Omit),
    ],
};

static INGRESS_SPEC: Message = Message {
    name: "IngressSpec",
    fields: &[
        f(4, "ingressClassName", Str, Ptr),
        f(1, "defaultBackend", Msg(&INGRESS_BACKEND), Ptr),
        r(2, "tls", Msg(&INGRESS_TLS), Omit),
        r(3, "rules", Msg(&INGRESS_RULE), Omit),
    ],
};

static INGRESS_TLS: Message = Message {
    name: "IngressTLS",
    fields: &[r(1, "hosts", Str, Omit), f(2, "secretName", Str, Omit)],
};

static INGRESS_RULE: Message = Message {
    name: "IngressRule",
    fields: &[
        f(1, "host", Str, Omit),
        f(2, "ingressRuleValue", Msg(&INGRESS_RULE_VALUE), Inline),
    ],
};

static INGRESS_RULE_VALUE: Message = Message {
    name: "IngressRuleValue",
    fields: &[f(1, "http", Msg(&HTTP_INGRESS_RULE_VALUE), Ptr)],
};

static HTTP_INGRESS_RULE_VALUE: Message = Message {
    name: "HTTPIngressRuleValue",
    fields: &[r(1, "paths", Msg(&HTTP_INGRESS_PATH), Always)],
};

static HTTP_INGRESS_PATH: Message = Message {
    name: "HTTPIngressPath",
    fields: &[
        f(1, "path", Str, Omit),
        f(3, "pathType", Str, PtrNull),
        f(2, "backend", Msg(&INGRESS_BACKEND), Always),
    ],
};

static INGRESS_BACKEND: Message = Message {
    name: "IngressBackend",
    fields: &[
        f(4, "service", Msg(&INGRESS_SERVICE_BACKEND), Ptr),
        f(3, "resource", Msg(&TYPED_LOCAL_OBJECT_REFERENCE), Ptr),
    ],
};

static INGRESS_SERVICE_BACKEND: Message = Message {
    name: "IngressServiceBackend",
    fields: &[
        f(1, "name", Str, Always),
        f(2, "port", Msg(&SERVICE_BACKEND_PORT), Omit),
    ],
};

static SERVICE_BACKEND_PORT: Message = Message {
    name: "ServiceBackendPort",
    fields: &[f(1, "name", Str, Omit), f(2, "number", I32, Omit)],
};

static TYPED_LOCAL_OBJECT_REFERENCE: Message = Message {
    name: "TypedLocalObjectReference",
    fields: &[
        f(1, "apiGroup", Str, PtrNull),
        f(2, "kind", Str, Always),
        f(3, "name", Str, Always),
    ],
};

static INGRESS_STATUS: Message = Message {
    name: "IngressStatus",
    fields: &[f(
        1,
        "loadBalancer",
        Msg(&INGRESS_LOAD_BALANCER_STATUS),
        Omit,
    )],
};

static INGRESS_LOAD_BALANCER_STATUS: Message = Message {
    name: "IngressLoadBalancerStatus",
    fields: &[r(1, "ingress", Msg(&INGRESS_LOAD_BALANCER_INGRESS), Omit)],
};

static INGRESS_LOAD_BALANCER_INGRESS: Message = Message {
    name: "IngressLoadBalancerIngress",
    fields: &[
        f(1, "ip", Str, Omit),
        f(2, "hostname", Str, Omit),
        r(4, "ports", Msg(&PORT_STATUS), Omit),
    ],
};

// ---------------------------------------------------------------------------
// Decoding by schema

/// What was read for one field of a message.
enum Slot<'a> {
    Absent,
    /// Last varint (singular scalars).
    Varint(u64),
    /// Last string (singular `Str`).
    Raw(&'a [u8]),
    /// Every occurrence of a singular embedded message; protobuf merges them,
    /// which decoding their concatenation reproduces.
    Chunks(Vec<&'a [u8]>),
    List(Vec<Value>),
    Map(Map<String, Value>),
}

fn decode_message(
    buf: &[u8],
    msg: &'static Message,
    depth: usize,
) -> Result<Map<String, Value>, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError::TooDeep);
    }
    let mut slots: Vec<Slot<'_>> = msg.fields.iter().map(|_| Slot::Absent).collect();
    let mut rd = Reader::new(buf);
    while !rd.done() {
        let (num, wire) = rd.tag()?;
        let Some(idx) = msg.fields.iter().position(|fd| u64::from(fd.num) == num) else {
            rd.skip(wire, depth)?;
            continue;
        };
        let fd = &msg.fields[idx];
        let wrong = || ProtobufError::WrongWireType {
            message: msg.name,
            field: fd.num,
            wire_type: wire,
        };
        let slot = &mut slots[idx];
        if fd.kind.is_varint() {
            if fd.repeated {
                let list = list_of(slot);
                match wire {
                    0 => list.push(scalar_value(fd.kind, rd.varint()?)),
                    2 => {
                        // Packed encoding.
                        let mut packed = Reader::new(rd.bytes()?);
                        while !packed.done() {
                            list.push(scalar_value(fd.kind, packed.varint()?));
                        }
                    }
                    _ => return Err(wrong()),
                }
            } else if wire == 0 {
                *slot = Slot::Varint(rd.varint()?);
            } else {
                return Err(wrong());
            }
            continue;
        }
        if wire != 2 {
            return Err(wrong());
        }
        let data = rd.bytes()?;
        if fd.kind.is_map() {
            if !matches!(slot, Slot::Map(_)) {
                *slot = Slot::Map(Map::new());
            }
            if let Slot::Map(m) = slot {
                let (k, v) = decode_map_entry(data, fd.kind, depth + 1)?;
                m.insert(k, v);
            }
        } else if fd.repeated {
            let v = element_value(fd.kind, data, depth + 1)?;
            list_of(slot).push(v);
        } else if matches!(fd.kind, Str) {
            *slot = Slot::Raw(data);
        } else {
            match slot {
                Slot::Chunks(chunks) => chunks.push(data),
                _ => *slot = Slot::Chunks(vec![data]),
            }
        }
    }

    let mut out = Map::new();
    for (fd, slot) in msg.fields.iter().zip(slots) {
        if fd.emit == Inline {
            let Msg(sub) = fd.kind else { continue };
            let inner = decode_message(&joined(&slot), sub, depth + 1)?;
            for (k, v) in inner {
                out.entry(k).or_insert(v);
            }
            continue;
        }
        if let Some(v) = field_json(fd, slot, depth)? {
            out.insert(fd.json.to_string(), v);
        }
    }
    Ok(out)
}

fn list_of<'s, 'a>(slot: &'s mut Slot<'a>) -> &'s mut Vec<Value> {
    if !matches!(slot, Slot::List(_)) {
        *slot = Slot::List(Vec::new());
    }
    match slot {
        Slot::List(l) => l,
        _ => unreachable!("slot was just made a list"),
    }
}

/// The bytes of a singular embedded message (empty if absent).
fn joined(slot: &Slot<'_>) -> Vec<u8> {
    match slot {
        Slot::Chunks(chunks) => chunks.concat(),
        _ => Vec::new(),
    }
}

fn scalar_value(kind: Kind, v: u64) -> Value {
    match kind {
        Bool => Value::Bool(v != 0),
        // Go's generated decoder truncates to the field's width.
        I32 => Value::Number(Number::from(v as i32)),
        _ => Value::Number(Number::from(v as i64)),
    }
}

/// One element of a repeated field.
fn element_value(kind: Kind, data: &[u8], depth: usize) -> Result<Value, ProtobufError> {
    Ok(match kind {
        Str => Value::String(lossy(data)),
        Msg(m) => Value::Object(decode_message(data, m, depth)?),
        Time => time_value(data, depth)?,
        Qty => quantity_value(data, depth)?,
        IntStr => int_or_string_value(data, depth)?,
        FieldsV1 => fields_v1_value(data, depth)?,
        _ => unreachable!("no repeated field of this kind in the schema"),
    })
}

/// A map entry message: 1 key (string), 2 value.
fn decode_map_entry(
    data: &[u8],
    kind: Kind,
    depth: usize,
) -> Result<(String, Value), ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError::TooDeep);
    }
    let mut key = String::new();
    let mut value: Option<&[u8]> = None;
    let mut rd = Reader::new(data);
    while !rd.done() {
        let (num, wire) = rd.tag()?;
        match (num, wire) {
            (1, 2) => key = lossy(rd.bytes()?),
            (2, 2) => value = Some(rd.bytes()?),
            (1 | 2, w) => {
                return Err(ProtobufError::WrongWireType {
                    message: "map entry",
                    field: num as u32,
                    wire_type: w,
                })
            }
            (_, w) => rd.skip(w, depth)?,
        }
    }
    let v = value.unwrap_or(&[]);
    let json = match kind {
        MapStr => Value::String(lossy(v)),
        MapBytes => Value::String(base64::engine::general_purpose::STANDARD.encode(v)),
        _ => quantity_value(v, depth + 1)?,
    };
    Ok((key, json))
}

/// The JSON of a non-inline field, or None when `encoding/json` omits it.
fn field_json(fd: &Field, slot: Slot<'_>, depth: usize) -> Result<Option<Value>, ProtobufError> {
    let emit = fd.emit;
    if fd.repeated || fd.kind.is_map() {
        let (empty, v) = match slot {
            Slot::List(l) => (l.is_empty(), Value::Array(l)),
            Slot::Map(m) => (m.is_empty(), Value::Object(m)),
            _ => (true, Value::Null),
        };
        return Ok(match (empty, emit) {
            (false, _) => Some(v),
            // A nil slice or map: written as null only without omitempty.
            (true, Always | PtrNull) => Some(Value::Null),
            (true, _) => None,
        });
    }
    let present = !matches!(slot, Slot::Absent);
    match (present, emit) {
        (false, Ptr) => return Ok(None),
        (false, PtrNull) => return Ok(Some(Value::Null)),
        _ => {}
    }
    let v = match fd.kind {
        Str => {
            let s = match slot {
                Slot::Raw(b) => lossy(b),
                _ => String::new(),
            };
            if emit == Omit && s.is_empty() {
                return Ok(None);
            }
            Value::String(s)
        }
        Bool | I32 | I64 => {
            let raw = match slot {
                Slot::Varint(v) => v,
                _ => 0,
            };
            let v = scalar_value(fd.kind, raw);
            let zero = match &v {
                Value::Bool(b) => !b,
                Value::Number(n) => n.as_i64() == Some(0),
                _ => false,
            };
            if emit == Omit && zero {
                return Ok(None);
            }
            v
        }
        // Structs: `omitempty` never omits them, so Omit behaves as Always.
        Msg(m) => Value::Object(decode_message(&joined(&slot), m, depth + 1)?),
        Time => time_value(&joined(&slot), depth + 1)?,
        Qty => quantity_value(&joined(&slot), depth + 1)?,
        IntStr => int_or_string_value(&joined(&slot), depth + 1)?,
        FieldsV1 => fields_v1_value(&joined(&slot), depth + 1)?,
        MapStr | MapBytes | MapQty => unreachable!("maps handled above"),
    };
    Ok(Some(v))
}

/// `metav1.Time`: empty bytes are the zero time (JSON null); otherwise
/// `seconds` (field 1) in UTC, whole seconds (`nanos` is ignored upstream).
fn time_value(data: &[u8], depth: usize) -> Result<Value, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError::TooDeep);
    }
    if data.is_empty() {
        return Ok(Value::Null);
    }
    let mut seconds: i64 = 0;
    let mut rd = Reader::new(data);
    while !rd.done() {
        let (num, wire) = rd.tag()?;
        match (num, wire) {
            (1, 0) => seconds = rd.varint()? as i64,
            (2, 0) => {
                rd.varint()?;
            }
            (1 | 2, w) => {
                return Err(ProtobufError::WrongWireType {
                    message: "Timestamp",
                    field: num as u32,
                    wire_type: w,
                })
            }
            (_, w) => rd.skip(w, depth)?,
        }
    }
    if !(0..=MAX_TIME_SECS).contains(&seconds) {
        return Err(ProtobufError::InvalidTime(seconds));
    }
    let t = UNIX_EPOCH + Duration::from_secs(seconds as u64);
    Ok(Value::String(crate::kube::time::rfc3339(t)))
}

/// `resource.Quantity`: its string (field 1); the zero Quantity is "0".
fn quantity_value(data: &[u8], depth: usize) -> Result<Value, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError::TooDeep);
    }
    let mut s: &[u8] = &[];
    let mut rd = Reader::new(data);
    while !rd.done() {
        let (num, wire) = rd.tag()?;
        match (num, wire) {
            (1, 2) => s = rd.bytes()?,
            (1, w) => {
                return Err(ProtobufError::WrongWireType {
                    message: "Quantity",
                    field: 1,
                    wire_type: w,
                })
            }
            (_, w) => rd.skip(w, depth)?,
        }
    }
    Ok(Value::String(if s.is_empty() {
        "0".to_string()
    } else {
        lossy(s)
    }))
}

/// `intstr.IntOrString`: 1 type (0 int, 1 string), 2 intVal, 3 strVal.
fn int_or_string_value(data: &[u8], depth: usize) -> Result<Value, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError::TooDeep);
    }
    let (mut ty, mut int_val, mut str_val): (i64, i32, &[u8]) = (0, 0, &[]);
    let mut rd = Reader::new(data);
    while !rd.done() {
        let (num, wire) = rd.tag()?;
        match (num, wire) {
            (1, 0) => ty = rd.varint()? as i64,
            (2, 0) => int_val = rd.varint()? as i32,
            (3, 2) => str_val = rd.bytes()?,
            (1..=3, w) => {
                return Err(ProtobufError::WrongWireType {
                    message: "IntOrString",
                    field: num as u32,
                    wire_type: w,
                })
            }
            (_, w) => rd.skip(w, depth)?,
        }
    }
    match ty {
        0 => Ok(Value::Number(Number::from(int_val))),
        1 => Ok(Value::String(lossy(str_val))),
        t => Err(ProtobufError::InvalidIntOrString(t)),
    }
}

/// `metav1.FieldsV1`: field 1 holds the JSON itself.
fn fields_v1_value(data: &[u8], depth: usize) -> Result<Value, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError::TooDeep);
    }
    let mut raw: Option<&[u8]> = None;
    let mut rd = Reader::new(data);
    while !rd.done() {
        let (num, wire) = rd.tag()?;
        match (num, wire) {
            (1, 2) => raw = Some(rd.bytes()?),
            (1, w) => {
                return Err(ProtobufError::WrongWireType {
                    message: "FieldsV1",
                    field: 1,
                    wire_type: w,
                })
            }
            (_, w) => rd.skip(w, depth)?,
        }
    }
    match raw {
        // A nil Raw marshals as null.
        None => Ok(Value::Null),
        Some(b) => serde_json::from_slice(b).map_err(|_| ProtobufError::InvalidFieldsV1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message reachable from KINDS has unique field numbers and names.
    #[test]
    fn schema_has_no_duplicate_fields() {
        fn walk(m: &'static Message, seen: &mut Vec<&'static str>) {
            if seen.contains(&m.name) {
                return;
            }
            seen.push(m.name);
            for (i, a) in m.fields.iter().enumerate() {
                for b in &m.fields[i + 1..] {
                    assert_ne!(a.num, b.num, "{}: duplicate number {}", m.name, a.num);
                    assert_ne!(a.json, b.json, "{}: duplicate name {}", m.name, a.json);
                }
                if let Msg(sub) = a.kind {
                    walk(sub, seen);
                }
                assert!(
                    a.emit != Inline || (matches!(a.kind, Msg(_)) && !a.repeated),
                    "{}.{}: only singular messages inline",
                    m.name,
                    a.json
                );
            }
        }
        let mut seen = Vec::new();
        for (_, _, m) in KINDS {
            walk(m, &mut seen);
        }
        assert!(seen.len() > 60);
    }

    #[test]
    fn varints_and_skips() {
        let mut r = Reader::new(&[0xac, 0x02]);
        assert_eq!(r.varint(), Ok(300));
        let mut r = Reader::new(&[0xff; 11]);
        assert_eq!(r.varint(), Err(ProtobufError::VarintOverflow));
        // Fixed64, fixed32 and a group with a nested varint are skipped.
        let mut r = Reader::new(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9, 0x08, 0x01, 0x0c]);
        r.skip(1, 0).unwrap();
        r.skip(5, 0).unwrap();
        r.skip(3, 0).unwrap();
        assert!(r.done());
    }
}

//! `kubegate sim node`'s command line (docs/sim.md#the-sim-as-a-node):
//! pure, but for reading the PEM files it names (read here, so a missing
//! file is a usage error before anything starts).

use crate::exit::UsageError;
use crate::sim::pod_users;
use lexopt::prelude::*;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The host ids a node's pods run as unless `--uid-range` says otherwise:
/// disjoint from the embedded sims' default (`pod_users::DEFAULT_UID_RANGE`),
/// since both run on one host in the tests.
pub const DEFAULT_NODE_UID_RANGE: (u32, u32) = (300_000, 365_535);

/// A taint the node registers with (`--register-with-taints`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

/// What `kubegate sim node …` asks for.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    pub kubeconfig: PathBuf,
    pub name: String,
    pub state_dir: PathBuf,
    /// B of the pod block `127.B.0.0/16`.
    pub pod_block: u8,
    /// The kubelet API's address (its port is the Node's daemon endpoint).
    pub listen: SocketAddr,
    pub tls_cert_pem: Vec<u8>,
    pub tls_key_pem: Vec<u8>,
    /// The one CA whose client certificates the kubelet API accepts.
    pub client_ca_pem: Vec<u8>,
    pub taints: Vec<Taint>,
    pub labels: Vec<(String, String)>,
    pub uid_range: (u32, u32),
    /// `--capacity`: what the Node offers instead of the host's figures
    /// (capacity and allocatable alike).
    pub capacity: Vec<(String, String)>,
}

/// The resources `--capacity` may set.
const CAPACITY_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

/// `cpu=64,memory=256Gi,…`: each a known resource and a positive quantity.
pub fn parse_capacity(s: &str) -> Result<Vec<(String, String)>, String> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("{p:?}: expected RESOURCE=QUANTITY"))?;
            if !CAPACITY_RESOURCES.contains(&k) {
                return Err(format!("{k:?}: one of {}", CAPACITY_RESOURCES.join(", ")));
            }
            match crate::kube::quantity::Quantity::parse(v) {
                Ok(q) if q.is_positive() => Ok((k.to_string(), v.to_string())),
                _ => Err(format!("{p:?}: not a positive quantity")),
            }
        })
        .collect()
}

fn usage(m: impl Into<String>) -> UsageError {
    UsageError(m.into())
}

/// A `127.B.0.0/16` block: the only shape of `--pod-cidr` (pods listen on
/// loopback addresses of this host).
pub fn parse_pod_cidr(s: &str) -> Result<u8, String> {
    let err = || format!("{s:?}: expected 127.B.0.0/16 (a /16 inside 127.0.0.0/8)");
    let (addr, bits) = s.split_once('/').ok_or_else(err)?;
    if bits != "16" {
        return Err(err());
    }
    let parts: Vec<&str> = addr.split('.').collect();
    match parts.as_slice() {
        ["127", b, "0", "0"] => match b.parse::<u8>() {
            // No leading zeros: "0244" is not 244 to every reader.
            Ok(n) if (1..=254).contains(&n) && n.to_string() == *b => Ok(n),
            _ => Err(err()),
        },
        _ => Err(err()),
    }
}

/// `KEY=VALUE:EFFECT` (VALUE may be empty; EFFECT one of upstream's three).
pub fn parse_taint(s: &str) -> Result<Taint, String> {
    let (kv, effect) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?}: expected KEY=VALUE:EFFECT"))?;
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "{s:?}: the effect must be NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    if crate::kube::names::check_label_key(key).is_err() || !label_value_ok(value) {
        return Err(format!("{s:?}: not a valid taint key and value"));
    }
    Ok(Taint {
        key: key.to_string(),
        value: value.to_string(),
        effect: effect.to_string(),
    })
}

fn label_value_ok(v: &str) -> bool {
    v.is_empty() || crate::kube::names::check_label_value(v).is_ok()
}

/// `KEY=VALUE[,KEY=VALUE…]`.
pub fn parse_labels(s: &str) -> Result<Vec<(String, String)>, String> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("{p:?}: expected KEY=VALUE"))?;
            if crate::kube::names::check_label_key(k).is_err() || !label_value_ok(v) {
                return Err(format!("{p:?}: not a valid label"));
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

fn read_pem(flag: &str, path: &str, what: &str) -> Result<Vec<u8>, UsageError> {
    let bytes = std::fs::read(path).map_err(|e| usage(format!("{flag} {path}: {e}")))?;
    if !String::from_utf8_lossy(&bytes).contains(&format!("-----BEGIN {what}")) {
        return Err(usage(format!("{flag} {path}: no PEM {what} in the file")));
    }
    Ok(bytes)
}

/// Reads the words after `sim node`.
pub fn parse(argv: &[String]) -> Result<NodeOptions, UsageError> {
    let mut p = lexopt::Parser::from_args(argv.iter().cloned());
    let mut kubeconfig = None;
    let mut name = None;
    let mut state_dir = None;
    let mut pod_block = 244u8;
    let mut listen = None;
    let (mut cert, mut key, mut ca) = (None, None, None);
    let mut taints = Vec::new();
    let mut labels = Vec::new();
    let mut uid_range = DEFAULT_NODE_UID_RANGE;
    let mut capacity = Vec::new();
    while let Some(arg) = p.next().map_err(|e| usage(e.to_string()))? {
        let flag = match arg {
            Long(l) => l.to_string(),
            other => return Err(usage(other.unexpected().to_string())),
        };
        let mut value = |flag: &str| -> Result<String, UsageError> {
            let v = p
                .value()
                .map_err(|e| usage(e.to_string()))?
                .string()
                .map_err(|e| usage(format!("{flag}: {e:?}")))?;
            if v.is_empty() {
                return Err(usage(format!("{flag} must not be empty")));
            }
            Ok(v)
        };
        match flag.as_str() {
            "kubeconfig" => kubeconfig = Some(PathBuf::from(value("--kubeconfig")?)),
            "name" => {
                let v = value("--name")?;
                crate::kube::names::check_dns_subdomain(&v)
                    .map_err(|e| usage(format!("--name {v:?}: {e}")))?;
                name = Some(v);
            }
            "state-dir" => state_dir = Some(PathBuf::from(value("--state-dir")?)),
            "pod-cidr" => {
                pod_block = parse_pod_cidr(&value("--pod-cidr")?)
                    .map_err(|e| usage(format!("--pod-cidr {e}")))?;
            }
            "listen" => {
                let v = value("--listen")?;
                let a: SocketAddr = v
                    .parse()
                    .map_err(|e| usage(format!("--listen {v:?}: {e} (expected IP:PORT)")))?;
                if !a.ip().is_loopback() {
                    return Err(usage(format!(
                        "--listen {v}: the node's InternalIP is 127.0.0.1, so its kubelet API listens on loopback"
                    )));
                }
                listen = Some(a);
            }
            "tls-cert-file" => {
                cert = Some(read_pem(
                    "--tls-cert-file",
                    &value("--tls-cert-file")?,
                    "CERTIFICATE",
                )?);
            }
            "tls-private-key-file" => {
                let v = value("--tls-private-key-file")?;
                key = Some(read_pem("--tls-private-key-file", &v, "")?);
            }
            "client-ca-file" => {
                ca = Some(read_pem(
                    "--client-ca-file",
                    &value("--client-ca-file")?,
                    "CERTIFICATE",
                )?);
            }
            "register-with-taints" => {
                for t in value("--register-with-taints")?.split(',') {
                    taints.push(
                        parse_taint(t).map_err(|e| usage(format!("--register-with-taints {e}")))?,
                    );
                }
            }
            "node-labels" => labels.extend(
                parse_labels(&value("--node-labels")?)
                    .map_err(|e| usage(format!("--node-labels {e}")))?,
            ),
            "capacity" => capacity.extend(
                parse_capacity(&value("--capacity")?)
                    .map_err(|e| usage(format!("--capacity {e}")))?,
            ),
            "uid-range" => {
                uid_range = pod_users::parse_range(&value("--uid-range")?)
                    .map_err(|e| usage(format!("--uid-range: {e}")))?;
            }
            other => return Err(usage(format!("invalid option '--{other}'"))),
        }
    }
    fn need<T>(v: Option<T>, flag: &str) -> Result<T, UsageError> {
        v.ok_or_else(|| usage(format!("sim node needs {flag}")))
    }
    Ok(NodeOptions {
        kubeconfig: need(kubeconfig, "--kubeconfig FILE")?,
        name: need(name, "--name NAME")?,
        state_dir: need(state_dir, "--state-dir DIR")?,
        pod_block,
        listen: need(listen, "--listen 127.0.0.1:PORT")?,
        tls_cert_pem: need(cert, "--tls-cert-file F")?,
        tls_key_pem: need(key, "--tls-private-key-file F")?,
        client_ca_pem: need(ca, "--client-ca-file F (the CA of the API server's kubelet client certificate, and of nothing else)")?,
        taints,
        labels,
        uid_range,
        capacity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_cidrs_are_loopback_sixteens() {
        assert_eq!(parse_pod_cidr("127.244.0.0/16"), Ok(244));
        for bad in [
            "127.244.0.0/24",
            "10.0.0.0/16",
            "127.0.0.0/16",
            "127.255.0.0/16",
            "127.244.1.0/16",
            "127.0244.0.0/16",
            "127.244.0.0",
            "",
        ] {
            assert!(parse_pod_cidr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn taints_and_labels() {
        assert_eq!(
            parse_taint("kubegate.test/node=sim:NoSchedule"),
            Ok(Taint {
                key: "kubegate.test/node".into(),
                value: "sim".into(),
                effect: "NoSchedule".into()
            })
        );
        assert_eq!(
            parse_taint("dedicated:NoExecute").map(|t| t.value),
            Ok(String::new())
        );
        for bad in ["k=v", "k=v:Sometimes", "=v:NoSchedule", "k=v v:NoSchedule"] {
            assert!(parse_taint(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_labels("a=b,kubegate.test/node=sim"),
            Ok(vec![
                ("a".into(), "b".into()),
                ("kubegate.test/node".into(), "sim".into())
            ])
        );
        assert!(parse_labels("a").is_err());
        assert!(parse_labels("a=b c").is_err());
    }

    #[test]
    fn capacity_overrides() {
        assert_eq!(
            parse_capacity("cpu=64,memory=256Gi"),
            Ok(vec![
                ("cpu".into(), "64".into()),
                ("memory".into(), "256Gi".into())
            ])
        );
        for bad in ["gpu=1", "cpu=0", "cpu=-1", "cpu", "memory=lots"] {
            assert!(parse_capacity(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn missing_flags_are_named() {
        let e = parse(&["--name".into(), "n".into()]).unwrap_err();
        assert!(e.0.contains("--kubeconfig"), "{}", e.0);
        let e = parse(&["--listen".into(), "0.0.0.0:1".into()]).unwrap_err();
        assert!(e.0.contains("loopback"), "{}", e.0);
    }
}

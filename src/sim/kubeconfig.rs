//! The kubeconfig `kubegate sim --kubeconfig-out` writes: one cluster, one
//! user, one context, current. YAML written by hand (a fixed shape; every
//! value is either base64 or a quoted scalar), file mode 0600 since it may
//! hold a token or a client key.

use base64::Engine;
use std::path::Path;

pub struct KubeconfigSpec<'a> {
    pub server_url: &'a str,
    pub ca_pem: Option<&'a str>,
    pub token: Option<&'a str>,
    pub client_cert_pem: Option<&'a str>,
    pub client_key_pem: Option<&'a str>,
    pub namespace: &'a str,
}

/// Renders the kubeconfig as YAML.
pub fn render(spec: &KubeconfigSpec<'_>) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let mut out = String::new();
    out.push_str("apiVersion: v1\nkind: Config\nclusters:\n- name: kubegate-sim\n  cluster:\n");
    out.push_str(&format!("    server: {}\n", quote(spec.server_url)));
    if let Some(ca) = spec.ca_pem {
        out.push_str(&format!("    certificate-authority-data: {}\n", b64(ca)));
    }
    out.push_str("users:\n- name: kubegate-sim\n  user:");
    let mut any_user = false;
    if let Some(t) = spec.token {
        out.push_str(&format!("\n    token: {}", quote(t)));
        any_user = true;
    }
    if let (Some(c), Some(k)) = (spec.client_cert_pem, spec.client_key_pem) {
        out.push_str(&format!("\n    client-certificate-data: {}", b64(c)));
        out.push_str(&format!("\n    client-key-data: {}", b64(k)));
        any_user = true;
    }
    if !any_user {
        out.push_str(" {}");
    }
    out.push('\n');
    out.push_str("contexts:\n- name: kubegate-sim\n  context:\n    cluster: kubegate-sim\n    user: kubegate-sim\n");
    out.push_str(&format!("    namespace: {}\n", quote(spec.namespace)));
    out.push_str("current-context: kubegate-sim\npreferences: {}\n");
    out
}

/// Double-quoted YAML scalar with the escapes YAML needs.
fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            c if (c as u32) < 0x20 => q.push_str(&format!("\\x{:02x}", c as u32)),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// Writes the kubeconfig atomically with mode 0600 ([`crate::files`]:
/// temp file, sync, rename), creating the parent folder if needed.
pub fn write(path: &Path, contents: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    crate::files::write_atomic(path, contents.as_bytes(), 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_token_and_ca() {
        let y = render(&KubeconfigSpec {
            server_url: "https://127.0.0.1:6443",
            ca_pem: Some("PEM"),
            token: Some("t\"ok"),
            client_cert_pem: None,
            client_key_pem: None,
            namespace: "default",
        });
        assert!(y.contains("server: \"https://127.0.0.1:6443\""));
        assert!(y.contains("certificate-authority-data: UEVN"));
        assert!(y.contains("token: \"t\\\"ok\""));
        assert!(y.contains("current-context: kubegate-sim"));
        let plain = render(&KubeconfigSpec {
            server_url: "http://127.0.0.1:1",
            ca_pem: None,
            token: None,
            client_cert_pem: None,
            client_key_pem: None,
            namespace: "default",
        });
        assert!(plain.contains("user: {}"));
    }
}

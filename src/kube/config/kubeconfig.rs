//! kubeconfig files: reading (KUBECONFIG list, explicit path, or
//! `$HOME/.kube/config`), merging (first file wins per entry name and for
//! `current-context`, as client-go does), and resolving one context into a
//! [`Connection`]. Structural problems (bad YAML, an entry without a name)
//! fail the file; the fields of clusters and users are only checked for the
//! entries the chosen context uses, so one broken unrelated user does not
//! lock a developer out of every cluster.

use super::error::{KubeconfigError, KubeconfigErrorKind as Kind};
use super::exec::{ExecPlugin, ExecSpec};
use super::pem::{self, PairError};
use super::token_file::TokenFile;
use super::yaml::{self, FieldError, Node};
use super::{Env, LoadOptions};
use crate::kube::connection::{
    Anonymous, ClientCert, Connection, Credentials, StaticToken, TlsMaterial,
};
use crate::kube::tls_client;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use yaml_serde::Value;

/// The origin label of a kubeconfig given as a string.
pub(crate) const INLINE_LABEL: &str = "<inline kubeconfig>";

/// No real kubeconfig comes near this; it keeps `/dev/zero` or a wrong
/// path from eating memory.
const MAX_FILE_BYTES: u64 = 16 << 20;

/// One named entry (`clusters[]`, `contexts[]`, `users[]`) and the mapping
/// under its `cluster`/`context`/`user` key.
struct Entry {
    name: String,
    body: Value,
}

/// One parsed kubeconfig file.
pub(crate) struct KubeconfigFile {
    /// The path as given (or [`INLINE_LABEL`]): the prefix of every error.
    label: String,
    /// Where relative paths in this file resolve.
    dir: PathBuf,
    current_context: Option<String>,
    clusters: Vec<Entry>,
    contexts: Vec<Entry>,
    users: Vec<Entry>,
}

fn invalid(label: &str, key: impl Into<String>, msg: impl fmt::Display) -> KubeconfigError {
    KubeconfigError::at(Kind::Invalid, label, key, msg.to_string())
}

fn unsupported(label: &str, key: impl Into<String>, msg: impl Into<String>) -> KubeconfigError {
    KubeconfigError::at(Kind::Unsupported, label, key, msg)
}

fn from_field(label: &str, e: FieldError) -> KubeconfigError {
    invalid(label, e.key, e.message)
}

/// Parses one kubeconfig document.
pub(crate) fn parse_file(
    text: &str,
    label: &str,
    dir: &Path,
) -> Result<KubeconfigFile, KubeconfigError> {
    let root = yaml::parse(text).map_err(|m| invalid(label, "", m))?;
    let root_node = Node::new(&root);
    if !matches!(root_node.value, Value::Mapping(_) | Value::Null) {
        return Err(invalid(
            label,
            "",
            format!(
                "the document is {}, expected a mapping (apiVersion, clusters, contexts, users…)",
                yaml::type_name(root_node.value)
            ),
        ));
    }
    let current_context = root_node
        .opt_str("current-context", "current-context")
        .map_err(|e| from_field(label, e))?
        .map(str::to_string);
    let entries = |list: &str, inner: &str| -> Result<Vec<Entry>, KubeconfigError> {
        let mut out: Vec<Entry> = Vec::new();
        let items = root_node
            .opt_seq(list, list)
            .map_err(|e| from_field(label, e))?;
        for (i, item) in items.into_iter().enumerate() {
            let at = format!("{list}[{i}]");
            item.expect_map(&at).map_err(|e| from_field(label, e))?;
            let name = item
                .opt_str("name", &format!("{at}.name"))
                .map_err(|e| from_field(label, e))?
                .ok_or_else(|| invalid(label, format!("{at}.name"), "missing"))?;
            let body = item
                .get(inner)
                .map(|n| n.value.clone())
                .unwrap_or(Value::Null);
            Node::new(&body)
                .expect_map(&format!("{list}[{name}]"))
                .map_err(|e| from_field(label, e))?;
            // Within one file, as across files: the first entry wins.
            if !out.iter().any(|e| e.name == name) {
                out.push(Entry {
                    name: name.to_string(),
                    body,
                });
            }
        }
        Ok(out)
    };
    Ok(KubeconfigFile {
        label: label.to_string(),
        dir: dir.to_path_buf(),
        current_context,
        clusters: entries("clusters", "cluster")?,
        contexts: entries("contexts", "context")?,
        users: entries("users", "user")?,
    })
}

/// Reads at most [`MAX_FILE_BYTES`]; `Ok(None)` when the file is missing.
fn read_text(path: &Path) -> Result<Option<String>, KubeconfigError> {
    let label = path.display().to_string();
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(KubeconfigError::at(
                Kind::Io,
                &label,
                "",
                format!("cannot read: {e}"),
            ))
        }
    };
    let mut buf = Vec::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| KubeconfigError::at(Kind::Io, &label, "", format!("cannot read: {e}")))?;
    if buf.len() as u64 > MAX_FILE_BYTES {
        return Err(invalid(&label, "", "larger than 16 MiB: not a kubeconfig"));
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| invalid(&label, "", "not UTF-8 text"))
}

fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn load_path(path: &Path) -> Result<Option<KubeconfigFile>, KubeconfigError> {
    match read_text(path)? {
        None => Ok(None),
        Some(text) => parse_file(&text, &path.display().to_string(), &dir_of(path)).map(Some),
    }
}

/// The files `opts` names, parsed, in merge order.
pub(crate) fn read_files(opts: &LoadOptions) -> Result<Vec<KubeconfigFile>, KubeconfigError> {
    if let Some(p) = &opts.kubeconfig {
        return match load_path(p)? {
            Some(f) => Ok(vec![f]),
            None => Err(KubeconfigError::at(
                Kind::NoConfig,
                &p.display().to_string(),
                "",
                "does not exist",
            )),
        };
    }
    if let Some(list) = opts.env.get("KUBECONFIG").filter(|v| !v.is_empty()) {
        let mut seen: Vec<PathBuf> = Vec::new();
        let mut files = Vec::new();
        for p in std::env::split_paths(list) {
            if p.as_os_str().is_empty() || seen.contains(&p) {
                continue;
            }
            seen.push(p.clone());
            // client-go skips missing KUBECONFIG entries.
            if let Some(f) = load_path(&p)? {
                files.push(f);
            }
        }
        if files.is_empty() {
            let names: Vec<String> = seen.iter().map(|p| p.display().to_string()).collect();
            return Err(KubeconfigError::new(
                Kind::NoConfig,
                format!(
                    "KUBECONFIG: none of its files exist ({})",
                    if names.is_empty() {
                        "no paths".into()
                    } else {
                        names.join(", ")
                    }
                ),
            ));
        }
        return Ok(files);
    }
    let Some(home) = opts.env.home() else {
        return Err(KubeconfigError::new(
            Kind::NoConfig,
            "no kubeconfig: neither KUBECONFIG nor HOME is set",
        ));
    };
    let p = home.join(".kube").join("config");
    match load_path(&p)? {
        Some(f) => Ok(vec![f]),
        None => Err(KubeconfigError::at(
            Kind::NoConfig,
            &p.display().to_string(),
            "",
            "does not exist (and KUBECONFIG is not set)",
        )),
    }
}

/// The first entry called `name` across `files`, with its file.
fn find<'a>(
    files: &'a [KubeconfigFile],
    name: &str,
    list: impl Fn(&KubeconfigFile) -> &Vec<Entry>,
) -> Option<(&'a KubeconfigFile, &'a Entry)> {
    files
        .iter()
        .find_map(|f| list(f).iter().find(|e| e.name == name).map(|e| (f, e)))
}

fn labels(files: &[KubeconfigFile]) -> String {
    files
        .iter()
        .map(|f| f.label.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn known_names(files: &[KubeconfigFile], list: impl Fn(&KubeconfigFile) -> &Vec<Entry>) -> String {
    let mut names: Vec<&str> = Vec::new();
    for f in files {
        for e in list(f) {
            if !names.contains(&e.name.as_str()) {
                names.push(&e.name);
            }
        }
    }
    if names.is_empty() {
        "none are defined".into()
    } else {
        format!("defined: {}", names.join(", "))
    }
}

/// Reads a file named by a kubeconfig key (relative to the file's folder).
fn read_ref(file: &KubeconfigFile, key: &str, path: &str) -> Result<Vec<u8>, KubeconfigError> {
    let p = resolve_path(&file.dir, path);
    let mut buf = Vec::new();
    std::fs::File::open(&p)
        .and_then(|f| f.take(MAX_FILE_BYTES).read_to_end(&mut buf))
        .map_err(|e| {
            KubeconfigError::at(
                Kind::Io,
                &file.label,
                key,
                format!("cannot read {}: {e}", p.display()),
            )
        })?;
    Ok(buf)
}

/// A token must fit in an `Authorization` header as is.
pub(crate) fn valid_token(t: &str) -> bool {
    !t.is_empty() && !t.chars().any(|c| c.is_control() || c.is_whitespace())
}

pub(crate) fn resolve_path(dir: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// `<key>-data` (base64) wins over `<key>` (a file). Returns the bytes and
/// the key they came from.
fn data_or_file(
    file: &KubeconfigFile,
    node: &Node<'_>,
    prefix: &str,
    key: &str,
) -> Result<Option<(Vec<u8>, String)>, KubeconfigError> {
    let data_key = format!("{prefix}.{key}-data");
    let file_key = format!("{prefix}.{key}");
    let f = |e| from_field(&file.label, e);
    if let Some(d) = node.opt_str(&format!("{key}-data"), &data_key).map_err(f)? {
        let bytes = pem::decode_base64(d).map_err(|m| invalid(&file.label, &data_key, m))?;
        return Ok(Some((bytes, data_key)));
    }
    if let Some(p) = node.opt_str(key, &file_key).map_err(f)? {
        return Ok(Some((read_ref(file, &file_key, p)?, file_key)));
    }
    Ok(None)
}

/// Resolves `context` (or the merged `current-context`).
pub(crate) fn resolve(
    files: &[KubeconfigFile],
    context: Option<&str>,
    env: &Env,
    exec_timeout: Duration,
) -> Result<Connection, KubeconfigError> {
    let (ctx_name, ctx_origin, ctx_key) = match context {
        Some(c) if !c.is_empty() => (c.to_string(), labels(files), "context"),
        _ => match files
            .iter()
            .find_map(|f| f.current_context.as_ref().map(|c| (f, c)))
        {
            Some((f, c)) => (c.clone(), f.label.clone(), "current-context"),
            None => {
                return Err(KubeconfigError::at(
                    Kind::NoConfig,
                    &labels(files),
                    "current-context",
                    "not set, and no context was chosen",
                ))
            }
        },
    };
    let Some((cfile, ctx)) = find(files, &ctx_name, |f| &f.contexts) else {
        return Err(invalid(
            &ctx_origin,
            ctx_key,
            format!(
                "context {ctx_name:?} is not defined ({})",
                known_names(files, |f| &f.contexts)
            ),
        ));
    };
    let ckey = format!("contexts[{ctx_name}]");
    let cnode = Node::new(&ctx.body);
    let f = |e| from_field(&cfile.label, e);
    let cluster_name = cnode
        .opt_str("cluster", &format!("{ckey}.cluster"))
        .map_err(f)?
        .ok_or_else(|| invalid(&cfile.label, format!("{ckey}.cluster"), "missing"))?;
    let user_name = cnode.opt_str("user", &format!("{ckey}.user")).map_err(f)?;
    let namespace = cnode
        .opt_str("namespace", &format!("{ckey}.namespace"))
        .map_err(f)?
        .unwrap_or("default")
        .to_string();

    let Some((clfile, cluster)) = find(files, cluster_name, |f| &f.clusters) else {
        return Err(invalid(
            &cfile.label,
            format!("{ckey}.cluster"),
            format!(
                "cluster {cluster_name:?} is not defined ({})",
                known_names(files, |f| &f.clusters)
            ),
        ));
    };
    let cl = resolve_cluster(clfile, cluster)?;
    let user = match user_name {
        None => None,
        Some(u) => match find(files, u, |f| &f.users) {
            Some(found) => Some(found),
            None => {
                return Err(invalid(
                    &cfile.label,
                    format!("{ckey}.user"),
                    format!(
                        "user {u:?} is not defined ({})",
                        known_names(files, |f| &f.users)
                    ),
                ))
            }
        },
    };

    let mut tls = TlsMaterial {
        ca_certs: cl.ca_certs,
        insecure_skip_verify: cl.insecure,
        server_name: cl.server_name,
        client_cert: None,
    };
    // Who is to blame if the TLS configuration does not build: the client
    // key when there is one, else the cluster.
    let mut blame = (clfile.label.clone(), format!("clusters[{}]", cluster.name));
    let credentials: Arc<dyn Credentials> = match user {
        None => Arc::new(Anonymous),
        Some((ufile, u)) => {
            let ru = resolve_user(ufile, u, env, exec_timeout, &cl.exec_cluster_info)?;
            tls.client_cert = ru.client_cert;
            if let Some(k) = ru.cert_key {
                blame = (ufile.label.clone(), k);
            }
            ru.credentials
        }
    };
    if cl.server.starts_with("https://") {
        // The same builder the REST and exec clients use: if it accepts the
        // material now, it will later (ureq's rustls path would panic on a
        // bad client key instead).
        tls_client::client_config(&tls).map_err(|e| {
            invalid(
                &blame.0,
                blame.1.clone(),
                format!("the TLS client configuration cannot be built: {e}"),
            )
        })?;
    }
    Ok(Connection {
        server: cl.server,
        tls,
        credentials,
        namespace,
        impersonate: None,
    })
}

struct ResolvedCluster {
    server: String,
    ca_certs: Vec<rustls_pki_types::CertificateDer<'static>>,
    insecure: bool,
    server_name: Option<String>,
    /// The `spec.cluster` an exec plugin with `provideClusterInfo` gets.
    exec_cluster_info: serde_json::Value,
}

/// Why a kubeconfig `server` cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerUrlError {
    Scheme,
    Credentials,
    Whitespace,
    NoHost,
}

impl fmt::Display for ServerUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerUrlError::Scheme => "the scheme must be https:// or http://",
            ServerUrlError::Credentials => "credentials in the server URL are not supported",
            ServerUrlError::Whitespace => "the URL contains whitespace",
            ServerUrlError::NoHost => "the URL has no host",
        })
    }
}

/// Normalises a server URL: an `https://` default scheme (as client-go),
/// no trailing slash, a host present, no credentials in it.
pub(crate) fn normalize_server(raw: &str) -> Result<String, ServerUrlError> {
    let s = raw.trim();
    let s = if s.contains("://") {
        s.to_string()
    } else {
        format!("https://{s}")
    };
    let (scheme, rest) = s.split_once("://").unwrap_or(("", ""));
    if scheme != "https" && scheme != "http" {
        return Err(ServerUrlError::Scheme);
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(ServerUrlError::Credentials);
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ServerUrlError::Whitespace);
    }
    if tls_client::host_of(&s).is_none() {
        return Err(ServerUrlError::NoHost);
    }
    Ok(s.trim_end_matches('/').to_string())
}

fn resolve_cluster(file: &KubeconfigFile, e: &Entry) -> Result<ResolvedCluster, KubeconfigError> {
    let label = &file.label;
    let key = format!("clusters[{}]", e.name);
    let n = Node::new(&e.body);
    let f = |e| from_field(label, e);
    let k = |s: &str| format!("{key}.{s}");
    if n.has("proxy-url") {
        return Err(unsupported(
            label,
            k("proxy-url"),
            "proxies are not supported; reach the API server directly",
        ));
    }
    let raw_server = n
        .opt_str("server", &k("server"))
        .map_err(f)?
        .ok_or_else(|| invalid(label, k("server"), "missing"))?;
    let server = normalize_server(raw_server).map_err(|m| invalid(label, k("server"), m))?;
    let insecure = n
        .opt_bool("insecure-skip-tls-verify", &k("insecure-skip-tls-verify"))
        .map_err(f)?
        .unwrap_or(false);
    let server_name = n
        .opt_str("tls-server-name", &k("tls-server-name"))
        .map_err(f)?
        .map(str::to_string);
    if let Some(name) = &server_name {
        if rustls_pki_types::ServerName::try_from(name.as_str()).is_err() {
            return Err(invalid(
                label,
                k("tls-server-name"),
                format!("{name:?} is not a valid DNS name or IP address"),
            ));
        }
    } else if server.starts_with("https://") {
        tls_client::server_name(&Connection::plain(&server))
            .map_err(|e| invalid(label, k("server"), e.0))?;
    }
    let ca = data_or_file(file, &n, &key, "certificate-authority")?;
    let mut ca_certs = Vec::new();
    let mut ca_pem = None;
    if let Some((bytes, from)) = ca {
        if insecure {
            return Err(invalid(
                label,
                k("insecure-skip-tls-verify"),
                format!("cannot be combined with {from} (kubectl refuses this too)"),
            ));
        }
        ca_certs = pem::certificates(&bytes).map_err(|m| invalid(label, &from, m))?;
        pem::check_ca(&ca_certs).map_err(|m| invalid(label, &from, m))?;
        ca_pem = Some(bytes);
    }
    let mut info = serde_json::json!({ "server": server });
    if let Some(name) = &server_name {
        info["tls-server-name"] = name.clone().into();
    }
    if insecure {
        info["insecure-skip-tls-verify"] = true.into();
    }
    if let Some(p) = &ca_pem {
        info["certificate-authority-data"] = pem::encode_base64(p).into();
    }
    // extensions[name == client.authentication.k8s.io/exec].extension
    if let Ok(exts) = n.opt_seq("extensions", &k("extensions")) {
        for ext in exts {
            if ext.get("name").and_then(|v| v.value.as_str())
                == Some("client.authentication.k8s.io/exec")
            {
                if let Some(cfg) = ext.get("extension") {
                    if let Ok(j) = serde_json::to_value(cfg.value) {
                        info["config"] = j;
                    }
                }
            }
        }
    }
    Ok(ResolvedCluster {
        server,
        ca_certs,
        insecure,
        server_name,
        exec_cluster_info: info,
    })
}

struct ResolvedUser {
    credentials: Arc<dyn Credentials>,
    client_cert: Option<ClientCert>,
    /// The key of the client key or certificate, for TLS build errors.
    cert_key: Option<String>,
}

fn resolve_user(
    file: &KubeconfigFile,
    e: &Entry,
    env: &Env,
    exec_timeout: Duration,
    cluster_info: &serde_json::Value,
) -> Result<ResolvedUser, KubeconfigError> {
    let label = &file.label;
    let key = format!("users[{}]", e.name);
    let n = Node::new(&e.body);
    let f = |e| from_field(label, e);
    let k = |s: &str| format!("{key}.{s}");

    if n.has("auth-provider") {
        let which = n
            .get("auth-provider")
            .and_then(|a| a.get("name"))
            .and_then(|v| v.value.as_str())
            .unwrap_or("(unnamed)");
        return Err(unsupported(
            label,
            k("auth-provider"),
            format!(
                "auth provider {which:?} is not supported (client-go removed the built-in \
                 providers); use an exec credential plugin instead, e.g. \
                 gke-gcloud-auth-plugin or kubelogin"
            ),
        ));
    }
    for basic in ["username", "password"] {
        if n.has(basic) {
            return Err(unsupported(
                label,
                k(basic),
                "basic authentication (username/password) is not supported; use a token, a \
                 client certificate or an exec plugin",
            ));
        }
    }
    for imp in ["as", "as-groups", "as-uid", "as-user-extra"] {
        if n.has(imp) {
            return Err(unsupported(label, k(imp), "impersonation is not supported"));
        }
    }

    // Client certificate: both halves or neither.
    let cert = data_or_file(file, &n, &key, "client-certificate")?;
    let pkey = data_or_file(file, &n, &key, "client-key")?;
    let (client_cert, cert_key) = match (cert, pkey) {
        (None, None) => (None, None),
        (Some((_, from)), None) => {
            return Err(invalid(
                label,
                k("client-key-data"),
                format!("missing ({from} is set; client-key or client-key-data is needed too)"),
            ))
        }
        (None, Some((_, from))) => {
            return Err(invalid(
                label,
                k("client-certificate-data"),
                format!(
                    "missing ({from} is set; client-certificate or client-certificate-data is \
                     needed too)"
                ),
            ))
        }
        (Some((cbytes, cfrom)), Some((kbytes, kfrom))) => {
            let chain = pem::certificates(&cbytes).map_err(|m| invalid(label, &cfrom, m))?;
            let pk = pem::private_key(&kbytes).map_err(|m| invalid(label, &kfrom, m))?;
            pem::check_pair(&chain, &pk).map_err(|e| match e {
                PairError::Key(m) => invalid(label, &kfrom, m),
                PairError::Cert(m) => invalid(label, &cfrom, m),
                PairError::Mismatch => invalid(
                    label,
                    &kfrom,
                    format!("the key does not match the certificate in {cfrom}"),
                ),
            })?;
            (Some(ClientCert { chain, key: pk }), Some(kfrom))
        }
    };

    let token = n.opt_str("token", &k("token")).map_err(f)?;
    let token_file = n.opt_str("tokenFile", &k("tokenFile")).map_err(f)?;
    let exec = n.get("exec");

    let credentials: Arc<dyn Credentials> = if let Some(exec) = exec {
        if token.is_some() || token_file.is_some() {
            return Err(invalid(
                label,
                k("exec"),
                "cannot be combined with token or tokenFile: choose one way to get a token",
            ));
        }
        let spec = ExecSpec::from_yaml(&exec, label, &k("exec"), &file.dir, cluster_info)?;
        let spec = ExecSpec {
            timeout: exec_timeout,
            ..spec
        };
        let plugin = ExecPlugin::new(spec, env.clone());
        // Fail now, with the install hint, if the command is not there.
        plugin
            .resolve_command()
            .map_err(|e| KubeconfigError::at(Kind::Credentials, label, k("exec.command"), e.0))?;
        Arc::new(plugin)
    } else if let Some(tf) = token_file {
        // client-go: the file's token takes precedence over `token`.
        let tf = TokenFile::new(resolve_path(&file.dir, tf));
        tf.prime()
            .map_err(|e| KubeconfigError::at(Kind::Credentials, label, k("tokenFile"), e.0))?;
        Arc::new(tf)
    } else if let Some(t) = token {
        if !valid_token(t) {
            return Err(invalid(
                label,
                k("token"),
                "contains spaces or control characters: not a bearer token",
            ));
        }
        Arc::new(StaticToken(t.to_string()))
    } else {
        Arc::new(Anonymous)
    };
    Ok(ResolvedUser {
        credentials,
        client_cert,
        cert_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: [&str; 4] = [
        include_str!("../../../tests/fixtures/kube/kubeconfig/kubeconfig-docker-desktop-inline-client-cert.yaml"),
        include_str!("../../../tests/fixtures/kube/kubeconfig/kubeconfig-eks-exec-plugin-aws-cli.yaml"),
        include_str!("../../../tests/fixtures/kube/kubeconfig/kubeconfig-multi-context-relative-paths-tokens.yaml"),
        include_str!("../../../tests/fixtures/kube/kubeconfig/kubeconfig-tokenfile-incluster-paths.yaml"),
    ];

    /// Loads `text` with no environment and a folder that does not exist:
    /// nothing is read from disk and no plugin can be found.
    fn try_load(text: &str) -> Result<Connection, KubeconfigError> {
        let opts = LoadOptions::with_env(Env::empty());
        super::super::from_kubeconfig_str_with(
            text,
            Path::new("/nonexistent/kubegate-fuzz"),
            None,
            &opts,
        )
    }

    /// xorshift64*: deterministic, no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    const PIECES: [&str; 24] = [
        ":",
        "- ",
        "\n",
        "  ",
        "{",
        "}",
        "[",
        "]",
        "&a ",
        "*a",
        "!!binary ",
        "!tag ",
        "'",
        "\"",
        "#",
        "---\n",
        "...\n",
        "? ",
        "|\n  ",
        ">-\n",
        "~",
        "null",
        "<<: *a\n",
        "\t",
    ];

    #[test]
    fn garbage_yaml_never_panics() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..3000 {
            let base = FIXTURES[round % FIXTURES.len()].as_bytes();
            let mut b = base.to_vec();
            for _ in 0..1 + rng.below(6) {
                let at = rng.below(b.len() + 1);
                match rng.below(5) {
                    0 if !b.is_empty() => {
                        let i = at.min(b.len() - 1);
                        b[i] = rng.next() as u8;
                    }
                    1 => {
                        let piece = PIECES[rng.below(PIECES.len())].as_bytes();
                        b.splice(at..at, piece.iter().copied());
                    }
                    2 if at < b.len() => {
                        let end = (at + rng.below(40)).min(b.len());
                        b.drain(at..end);
                    }
                    3 => b.truncate(at),
                    _ => {
                        // Duplicate a random slice elsewhere.
                        let from = rng.below(b.len());
                        let end = (from + rng.below(60)).min(b.len());
                        let chunk: Vec<u8> = b[from..end].to_vec();
                        let at = at.min(b.len());
                        b.splice(at..at, chunk);
                    }
                }
            }
            let text = String::from_utf8_lossy(&b);
            match try_load(&text) {
                Ok(_) => {}
                Err(e) => {
                    let s = e.to_string();
                    assert!(!s.is_empty());
                    // Never the key material of the fixtures.
                    assert!(!s.contains("LS0tLS1CRUdJTi"), "{s}");
                }
            }
        }
    }

    #[test]
    fn hostile_yaml_is_bounded() {
        // Deep nesting: the parser's recursion limit, not a stack overflow.
        let deep = "[".repeat(20_000);
        assert!(try_load(&deep).is_err());
        let deep_map = "a: ".repeat(10_000) + "b";
        assert!(try_load(&deep_map).is_err());
        // Alias expansion ("billion laughs").
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..12 {
            let prev = if i == 0 {
                "a".to_string()
            } else {
                format!("l{}", i - 1)
            };
            bomb.push_str(&format!(
                "l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        assert!(try_load(&bomb).is_err());
        // Odd but valid shapes.
        for text in [
            "",
            "~",
            "---\n...\n",
            "42",
            "clusters: ~\ncontexts: ~\nusers: ~\n",
            "current-context: [a]\n",
            "current-context: x\ncontexts: [{name: x, context: ~}]\n",
            "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: 7}}]\n",
            "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: 'https://[::1'}}]\n",
            "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: 'https://h', tls-server-name: 'bad name!'}}]\n",
            "current-context: !!binary aGVsbG8=\n",
            "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: x, args: [[1]], env: [{value: 1}]}}}]\n",
        ] {
            let _ = try_load(text);
        }
        let ok = try_load(
            "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: 'http://[::1]:8080/'}}]\n",
        )
        .expect("loads");
        assert_eq!(ok.server, "http://[::1]:8080");
        assert_eq!(ok.namespace, "default");
    }

    #[test]
    fn servers() {
        assert_eq!(
            normalize_server("https://h:6443/").as_deref(),
            Ok("https://h:6443")
        );
        assert_eq!(normalize_server("h:6443").as_deref(), Ok("https://h:6443"));
        assert_eq!(
            normalize_server("http://[::1]:8080/prefix/").as_deref(),
            Ok("http://[::1]:8080/prefix")
        );
        assert!(normalize_server("ftp://h").is_err());
        assert!(normalize_server("https://u:secret@h")
            .expect_err("userinfo")
            .to_string()
            .contains("credentials"));
        assert!(normalize_server("https://").is_err());
        assert!(normalize_server("https://h h").is_err());
    }
}

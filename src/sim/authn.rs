//! Who is calling the sim (docs/sim.md#identity): the user a request's
//! credential stands for, as kube-apiserver's authenticators would say.
//!
//! Three credentials, tried in upstream's order (client certificate first,
//! then bearer tokens): a client certificate the TLS layer verified
//! (CommonName = user, each Organization = a group), the sim's own admin
//! token (`kubegate-sim-admin` in `system:masters`), and the users of
//! `--token-auth-file` (kube-apiserver's CSV, [`parse_token_file`]).
//! Every authenticated user also gets `system:authenticated`. Tokens are
//! kept only as SHA-256 digests and compared in constant time; none is
//! ever logged.

use crate::token::{self, TokenDigest};
use std::collections::BTreeMap;

/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of `system:anonymous`.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The group whose members are allowed everything, before any RBAC rule
/// is read (kube-apiserver's privileged-group authorizer).
pub const MASTERS: &str = "system:masters";

/// A user as upstream's `user.Info` carries it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with these groups, `system:authenticated` added when
    /// missing (what upstream's authenticator wrapper does).
    pub fn authenticated(name: &str, uid: &str, groups: &[String]) -> UserInfo {
        let mut groups = groups.to_vec();
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_string());
        }
        UserInfo {
            name: name.to_string(),
            uid: uid.to_string(),
            groups,
            extra: BTreeMap::new(),
        }
    }

    /// `system:anonymous`, whom `--no-auth` serves.
    pub fn anonymous() -> UserInfo {
        UserInfo {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED.into()],
            extra: BTreeMap::new(),
        }
    }

    pub fn in_group(&self, g: &str) -> bool {
        self.groups.iter().any(|x| x == g)
    }

    /// `{"username", "uid"?, "groups", "extra"?}` as `UserInfo` is written
    /// in reviews and audit events (empty fields omitted).
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        if !self.name.is_empty() {
            m.insert("username".into(), self.name.clone().into());
        }
        if !self.uid.is_empty() {
            m.insert("uid".into(), self.uid.clone().into());
        }
        if !self.groups.is_empty() {
            m.insert("groups".into(), serde_json::json!(self.groups));
        }
        if !self.extra.is_empty() {
            m.insert("extra".into(), serde_json::json!(self.extra));
        }
        serde_json::Value::Object(m)
    }
}

/// One `--token-auth-file` user: its token's digest and who it is.
#[derive(Clone)]
pub struct TokenUser {
    digest: TokenDigest,
    pub user: UserInfo,
}

impl std::fmt::Debug for TokenUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenUser")
            .field("user", &self.user.name)
            .finish_non_exhaustive()
    }
}

/// Reads kube-apiserver's static token file: one record a line,
/// `token,user,uid[,"group1,group2"]`, fields as Go's `encoding/csv` reads
/// them (double-quoted fields may hold commas, `""` is a quote, leading
/// spaces trimmed), blank lines skipped. Refused, naming the line: fewer
/// than three columns, a bad quote, a field spanning lines. A record with
/// an empty token is skipped and a repeated token replaces the earlier
/// one, as upstream does (both with a warning). Empty group names are
/// dropped.
pub fn parse_token_file(text: &str) -> Result<Vec<TokenUser>, String> {
    let mut out: Vec<TokenUser> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let fields = csv_record(raw).map_err(|e| format!("line {n}: {e}"))?;
        if fields.len() < 3 {
            return Err(format!(
                "line {n}: a record must have at least 3 columns (token, user name, user uid), found {}",
                fields.len()
            ));
        }
        if fields[0].is_empty() {
            log::warn!("--token-auth-file line {n}: an empty token, record skipped");
            continue;
        }
        let groups: Vec<String> = fields
            .get(3)
            .map(|g| {
                g.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let digest = token::digest(&fields[0]);
        let user = UserInfo::authenticated(&fields[1], &fields[2], &groups);
        if let Some(prev) = out
            .iter_mut()
            .find(|t| token::same_digest(&t.digest, &digest))
        {
            log::warn!("--token-auth-file line {n}: a token seen before; this record replaces it");
            prev.user = user;
        } else {
            out.push(TokenUser { digest, user });
        }
    }
    Ok(out)
}

/// One CSV line's fields (`encoding/csv` with `TrimLeadingSpace`).
fn csv_record(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = line.trim_end_matches('\r').chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        let mut f = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => {
                        return Err(
                            "a quoted field is not closed (fields spanning lines are not read)"
                                .into(),
                        )
                    }
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        f.push('"');
                    }
                    Some('"') => break,
                    Some(c) => f.push(c),
                }
            }
            match chars.next() {
                None => {
                    fields.push(f);
                    return Ok(fields);
                }
                Some(',') => fields.push(f),
                Some(_) => return Err("extraneous text after a closing quote".into()),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(f);
                        return Ok(fields);
                    }
                    Some(',') => {
                        fields.push(f);
                        break;
                    }
                    Some('"') => return Err("a bare \" in a non-quoted field".into()),
                    Some(c) => f.push(c),
                }
            }
        }
    }
}

/// How the sim authenticates (built by `sim::cluster` from its options).
#[derive(Default)]
pub struct Authenticator {
    /// SHA-256 of the sim's own admin token, when it has one.
    pub admin_token: Option<TokenDigest>,
    /// The `--token-auth-file` users.
    pub token_users: Vec<TokenUser>,
    /// A client certificate the TLS layer verified authenticates
    /// (`--client-ca`, `--client-ca-file`).
    pub accept_client_cert: bool,
}

/// What authentication made of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authn {
    User(UserInfo),
    /// A credential was required and none was valid: 401.
    Refused,
}

impl Authenticator {
    /// True when a credential is required (anything but `--no-auth`).
    pub fn required(&self) -> bool {
        self.admin_token.is_some() || !self.token_users.is_empty() || self.accept_client_cert
    }

    /// Who `req` is. With `--no-auth`: `system:anonymous`.
    pub fn authenticate(&self, req: &crate::http::Request) -> Authn {
        if !self.required() {
            return Authn::User(UserInfo::anonymous());
        }
        if self.accept_client_cert {
            if let Some(der) = &req.client_cert_der {
                // rustls hands over only a certificate its verifier
                // accepted against the configured CAs.
                if let Some((cn, orgs)) = subject_cn_and_orgs(der) {
                    if !cn.is_empty() {
                        return Authn::User(UserInfo::authenticated(&cn, "", &orgs));
                    }
                }
            }
        }
        let Some(got) = req.bearer_token() else {
            return Authn::Refused;
        };
        let got = token::digest(got);
        if let Some(want) = &self.admin_token {
            if token::same_digest(&got, want) {
                return Authn::User(admin());
            }
        }
        // Every entry is compared (no early exit on a match's position).
        let mut found = None;
        for t in &self.token_users {
            if token::same_digest(&got, &t.digest) && found.is_none() {
                found = Some(&t.user);
            }
        }
        match found {
            Some(u) => Authn::User(u.clone()),
            None => Authn::Refused,
        }
    }
}

/// The holder of the sim's own token or client certificate.
pub fn admin() -> UserInfo {
    UserInfo::authenticated(
        super::reviews::ADMIN_USER,
        "",
        &[super::reviews::ADMIN_GROUP.to_string()],
    )
}

/// A DER element: (tag, contents, what follows).
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&l0, rest) = rest.split_first()?;
    let (len, rest) = if l0 < 0x80 {
        (usize::from(l0), rest)
    } else {
        let n = usize::from(l0 & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, &x| (a << 8) | usize::from(x));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// A certificate's subject CommonName and Organizations, read from its DER
/// (`Certificate ::= SEQUENCE { tbsCertificate, … }`; the subject is the
/// sixth field of the TBS, after an optional version).
pub fn subject_cn_and_orgs(cert: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert, _) = der(cert)?;
    let (_, tbs, _) = der(cert)?;
    let mut rest = tbs;
    let (tag, _, r) = der(rest)?;
    if tag == 0xa0 {
        rest = r;
    }
    // serial, signature, issuer, validity
    for _ in 0..4 {
        rest = der(rest)?.2;
    }
    let (_, mut subject, _) = der(rest)?;
    let mut cn = String::new();
    let mut orgs = Vec::new();
    while !subject.is_empty() {
        let (_, set, r) = der(subject)?;
        subject = r;
        let mut set = set;
        while !set.is_empty() {
            let (_, atv, r2) = der(set)?;
            set = r2;
            let (_, oid, val) = der(atv)?;
            let (vtag, value, _) = der(val)?;
            let text = match vtag {
                // UTF8String, PrintableString, T61String, IA5String
                0x0c | 0x13 | 0x14 | 0x16 => String::from_utf8_lossy(value).into_owned(),
                _ => continue,
            };
            match oid {
                [0x55, 0x04, 0x03] => cn = text,
                [0x55, 0x04, 0x0a] => orgs.push(text),
                _ => {}
            }
        }
    }
    Some((cn, orgs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_reads_kube_apiserver_csv() {
        let users = parse_token_file(
            "t1,alice,uid-a,\"devs,ops\"\n\n t2, bob ,uid-b\nt3,carol,u3,\"a \"\"q\"\"\",extra\n",
        )
        .unwrap();
        assert_eq!(users.len(), 3);
        assert_eq!(users[0].user.name, "alice");
        assert_eq!(
            users[0].user.groups,
            vec!["devs", "ops", "system:authenticated"]
        );
        assert_eq!(users[1].user.name, "bob ");
        assert_eq!(users[1].user.groups, vec!["system:authenticated"]);
        assert_eq!(users[2].user.groups[0], "a \"q\"");
        let e = parse_token_file("a,b,c\nonly,two\n").unwrap_err();
        assert!(e.starts_with("line 2: "), "{e}");
        let e = parse_token_file("a,b,\"c\n").unwrap_err();
        assert!(e.starts_with("line 1: "), "{e}");
        let e = parse_token_file("a,b,c\"d\n").unwrap_err();
        assert!(e.starts_with("line 1: "), "{e}");
        // An empty token is skipped, a repeated one replaces.
        let users = parse_token_file(",x,y\nt,a,1\nt,b,2\n").unwrap();
        assert_eq!(users.len(), 1);
        assert_eq!(users[0].user.name, "b");
    }

    #[test]
    fn reads_a_certificate_subject() {
        let c = crate::sim::tls::generate(&[], true).unwrap();
        let pem = c.client.unwrap().cert_pem;
        use rustls_pki_types::pem::PemObject;
        let der = rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        let (cn, orgs) = subject_cn_and_orgs(&der).unwrap();
        assert_eq!(cn, "kubegate-sim-admin");
        assert_eq!(orgs, vec!["system:masters"]);
        assert!(subject_cn_and_orgs(&[0x30, 0x05, 0x30]).is_none());
    }
}

//! `kubegate sim`'s command line (docs/sim.md, "Command line and
//! authentication"): the flags read into the sim's own [`SimOptions`], the
//! credential settled (a random token, `--token-file`, the deprecated
//! `--token`, `--no-auth`, or the client certificate of `--client-ca`),
//! and the warnings the start logs. Pure but for reading `--token-file`
//! (read here, so a bad file is a usage error before anything starts).
//!
//! The sim reads its own flags (as `workspace-agent` and `app-runner` do):
//! `cli::command` only recognises the word `sim` and passes the rest of the
//! line on, since `sim` and `cli` do not import each other. Out of scope:
//! printing a usage error and the binary's command list
//! ([`super::standalone::sim_main`] does, with the list it is given).

use super::cluster::SimOptions;
use super::pod_users;
use crate::exit::UsageError;
use lexopt::prelude::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

fn usage(m: impl Into<String>) -> UsageError {
    UsageError(m.into())
}

/// What `kubegate sim …` asks for: the sim's options, its credential
/// settled, and whether the deprecated `--token T` gave it.
#[derive(Debug, Clone)]
pub struct SimCommand {
    pub opts: SimOptions,
    /// `--token T` was used (deprecated: every local user reads it in `ps`).
    pub deprecated_token: bool,
}

impl SimCommand {
    /// What the sim's start should warn about: the deprecated `--token`,
    /// and a sim that serves anyone.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.deprecated_token {
            w.push("--token is deprecated: every local user reads it in `ps`; use --token-file F, or no flag at all (a random token, written into the kubeconfig)".to_string());
        }
        if self.opts.token.is_none()
            && !self.opts.client_ca
            && self.opts.token_users.is_empty()
            && self.opts.client_ca_pem.is_none()
        {
            w.push(format!("--no-auth: anyone who reaches {} is served, and the sim runs their commands as this user", self.opts.listen));
        }
        w
    }
}

/// How a standalone sim authenticates its clients. Any credential implies
/// `--tls`.
enum SimAuth {
    /// No flag: a random token (none with `--client-ca`: the client
    /// certificate), written into the kubeconfig only.
    Random,
    /// `--token-file F`: the file's contents, whitespace trimmed.
    File(PathBuf),
    /// `--token T`: deprecated (every local user reads it in `ps`).
    Flag(String),
    /// `--no-auth`: anyone who reaches the port is served.
    None,
}

fn non_empty(flag: &str, v: String) -> Result<String, UsageError> {
    if v.is_empty() {
        return Err(usage(format!("{flag} must not be empty")));
    }
    Ok(v)
}

/// Reads the words after `sim`; the credential is settled by
/// `settle_auth`. Flags not given keep [`SimOptions::default`].
pub fn parse(argv: &[String]) -> Result<SimCommand, UsageError> {
    let mut o = SimOptions::default();
    let mut auth: Option<(SimAuth, &str)> = None;
    let mut set_auth = |x: SimAuth, flag: &'static str| -> Result<(), UsageError> {
        if let Some((_, prev)) = &auth {
            return Err(usage(format!("{flag} and {prev} exclude each other")));
        }
        auth = Some((x, flag));
        Ok(())
    };
    let mut p = lexopt::Parser::from_args(argv);
    while let Some(arg) = p.next()? {
        match arg {
            Long("no-auth") => set_auth(SimAuth::None, "--no-auth")?,
            Long("tls") => o.tls = true,
            Long("client-ca") => o.client_ca = true,
            Long("allow-remote") => o.allow_remote = true,
            Long("listen") => {
                let v = p.value()?.string()?;
                o.listen = v
                    .parse::<SocketAddr>()
                    .map_err(|e| usage(format!("--listen {v:?}: {e} (expected IP:PORT)")))?;
            }
            Long("kubeconfig-out") => o.kubeconfig_out = Some(p.value()?.string()?.into()),
            Long("token-file") => {
                let v = non_empty("--token-file", p.value()?.string()?)?;
                set_auth(SimAuth::File(v.into()), "--token-file")?;
            }
            Long("token") => {
                let v = non_empty("--token", p.value()?.string()?)?;
                set_auth(SimAuth::Flag(v), "--token")?;
            }
            Long("state-dir") => o.state_dir = Some(p.value()?.string()?.into()),
            Long("namespace") => o.namespaces.push(p.value()?.string()?),
            Long("fail-image") => o.fail_images.push(p.value()?.string()?),
            Long("request-log") => o.request_log = Some(p.value()?.string()?.into()),
            Long("audit-log") => {
                o.audit_log = Some(non_empty("--audit-log", p.value()?.string()?)?.into());
            }
            Long("token-auth-file") => {
                let v = non_empty("--token-auth-file", p.value()?.string()?)?;
                let text = std::fs::read_to_string(&v)
                    .map_err(|e| usage(format!("--token-auth-file {v}: {e}")))?;
                o.token_users = super::authn::parse_token_file(&text)
                    .map_err(|e| usage(format!("--token-auth-file {v}: {e}")))?;
            }
            Long("client-ca-file") => {
                let v = non_empty("--client-ca-file", p.value()?.string()?)?;
                let text = std::fs::read_to_string(&v)
                    .map_err(|e| usage(format!("--client-ca-file {v}: {e}")))?;
                if !text.contains("-----BEGIN CERTIFICATE-----") {
                    return Err(usage(format!(
                        "--client-ca-file {v}: no PEM certificate in the file"
                    )));
                }
                o.client_ca_pem = Some(text);
            }
            Long("uid-range") => {
                o.uid_range = match p.value()?.string()?.as_str() {
                    "off" => None,
                    r => Some(
                        pod_users::parse_range(r)
                            .map_err(|e| usage(format!("--uid-range: {e}")))?,
                    ),
                };
            }
            Long("pods-dir") => o.pods_dir = Some(p.value()?.string()?.into()),
            other => return Err(other.unexpected().into()),
        }
    }
    let mut c = SimCommand {
        opts: o,
        deprecated_token: false,
    };
    settle_auth(&mut c, auth.map_or(SimAuth::Random, |(x, _)| x))?;
    Ok(c)
}

/// Applies the credential the flags chose, refusing the combinations
/// that make no sense or serve anyone from anywhere.
fn settle_auth(c: &mut SimCommand, auth: SimAuth) -> Result<(), UsageError> {
    let o = &mut c.opts;
    match auth {
        // `--token-auth-file` alone, without a kubeconfig to write: its
        // users are the only ones.
        SimAuth::Random if o.kubeconfig_out.is_none() && !o.token_users.is_empty() => {}
        SimAuth::Random => {
            if o.kubeconfig_out.is_none() {
                return Err(usage("the sim's credential (a random token, or with --client-ca a client certificate) is written only into the kubeconfig: pass --kubeconfig-out FILE (or --token-file F, or --no-auth)"));
            }
            // With --client-ca the client certificate is the credential.
            if !o.client_ca {
                o.token = Some(crate::token::random_hex());
            }
        }
        SimAuth::File(p) => o.token = Some(read_token_file(&p)?),
        SimAuth::Flag(t) => {
            o.token = Some(t);
            c.deprecated_token = true;
        }
        SimAuth::None => {
            if o.client_ca {
                return Err(usage("--no-auth and --client-ca exclude each other"));
            }
            if !o.token_users.is_empty() || o.client_ca_pem.is_some() {
                return Err(usage(
                    "--no-auth excludes --token-auth-file and --client-ca-file",
                ));
            }
            if o.allow_remote {
                return Err(usage("--no-auth with --allow-remote would run anyone's commands on this host: give the sim a token (--token-file F, or none: a random one)"));
            }
        }
    }
    // A credential travels over TLS only: kubectl (client-go) sends no
    // token or client certificate to a plain-HTTP server.
    if o.token.is_some() || o.client_ca || !o.token_users.is_empty() || o.client_ca_pem.is_some() {
        o.tls = true;
    }
    Ok(())
}

/// `--token-file F`: one line without spaces, surrounding whitespace
/// trimmed.
fn read_token_file(p: &Path) -> Result<String, UsageError> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| usage(format!("--token-file {}: {e}", p.display())))?;
    let t = text.trim();
    if t.is_empty() {
        return Err(usage(format!(
            "--token-file {}: the file is empty",
            p.display()
        )));
    }
    if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(usage(format!(
            "--token-file {}: a token is one line without spaces",
            p.display()
        )));
    }
    Ok(t.to_string())
}

#[cfg(test)]
mod tests;

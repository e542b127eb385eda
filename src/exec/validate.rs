//! Validation of exec requests before any call to Kubernetes
//! (docs/exec.md#validation-before-any-call-to-kubernetes):
//! every failure is `EXEC_INVALID` with a message a person can act on.

use crate::api::{ApiError, Code};
use crate::kube::names::{check_dns_label, check_dns_subdomain};

/// Default [`Limits::max_command_args`].
pub const DEFAULT_MAX_COMMAND_ARGS: usize = 64;
/// Default [`Limits::max_arg_bytes`].
pub const DEFAULT_MAX_ARG_BYTES: usize = 8 * 1024;
/// Default [`Limits::max_command_bytes`].
pub const DEFAULT_MAX_COMMAND_BYTES: usize = 32 * 1024;
/// Default [`Limits::default_output_bytes`] and [`Limits::max_output_bytes`]
/// (1 MiB per stream).
pub const DEFAULT_OUTPUT_BYTES: usize = 1 << 20;
/// Default [`Limits::max_stdin_frame_bytes`].
pub const DEFAULT_MAX_STDIN_FRAME_BYTES: usize = 64 * 1024;
/// Default [`Limits::output_channel_frames`]: the bound of the queue from
/// exec-out to the client's socket (a slow client makes exec-out wait:
/// backpressure, docs/ARCHITECTURE.md).
pub const DEFAULT_OUTPUT_CHANNEL_FRAMES: usize = 128;

/// The limits of docs/exec.md#validation-before-any-call-to-kubernetes. The
/// daemon builds them from `[exec]`
/// (`server::settings::exec_limits`, whose keys are validated positive at
/// config load); [`Limits::default`] holds the same defaults as
/// `config.example.toml` (a server test checks they agree).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Arguments in a command.
    pub max_command_args: usize,
    /// Bytes in one argument.
    pub max_arg_bytes: usize,
    /// Bytes in the whole command.
    pub max_command_bytes: usize,
    /// Output cap per stream when the request names none.
    pub default_output_bytes: usize,
    /// Largest output cap a request may ask for.
    pub max_output_bytes: usize,
    /// Largest stdin frame of an interactive exec.
    pub max_stdin_frame_bytes: usize,
    /// Interactive output channel capacity, in frames.
    pub output_channel_frames: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_command_args: DEFAULT_MAX_COMMAND_ARGS,
            max_arg_bytes: DEFAULT_MAX_ARG_BYTES,
            max_command_bytes: DEFAULT_MAX_COMMAND_BYTES,
            default_output_bytes: DEFAULT_OUTPUT_BYTES,
            max_output_bytes: DEFAULT_OUTPUT_BYTES,
            max_stdin_frame_bytes: DEFAULT_MAX_STDIN_FRAME_BYTES,
            output_channel_frames: DEFAULT_OUTPUT_CHANNEL_FRAMES,
        }
    }
}

/// What to run where: the part of a request that both exec forms share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    pub project: String,
    pub uid: String,
    pub deployment: String,
    pub container: Option<String>,
    pub command: Vec<String>,
}

pub fn invalid(m: impl Into<String>) -> ApiError {
    ApiError::new(Code::ExecInvalid, m)
}

/// Kubernetes' rule for a DNS label ([`check_dns_label`]); exec's messages
/// are its own (docs/exec.md#validation-before-any-call-to-kubernetes).
fn is_dns_label(s: &str) -> bool {
    check_dns_label(s).is_ok()
}

/// Kubernetes' rule for a DNS subdomain ([`check_dns_subdomain`]).
fn is_dns_subdomain(s: &str) -> bool {
    check_dns_subdomain(s).is_ok()
}

impl ExecSpec {
    /// Checks every rule of docs/exec.md#validation-before-any-call-to-kubernetes.
    pub fn validate(&self, limits: &Limits) -> Result<(), ApiError> {
        self.validate_target()?;
        self.validate_command(limits)
    }

    /// The rules on the workspace, Deployment and container (what a
    /// tunnel, which runs no command, is checked by).
    pub fn validate_target(&self) -> Result<(), ApiError> {
        if !is_dns_label(&self.project) {
            return Err(invalid(
                "workspace project must be a lowercase DNS label ([a-z0-9-], starting and ending alphanumeric) of at most 63 characters",
            ));
        }
        if self.uid.trim().is_empty() || self.uid.chars().count() > 256 {
            return Err(invalid(
                "workspace uid must be between 1 and 256 characters and not blank",
            ));
        }
        if !is_dns_subdomain(&self.deployment) {
            return Err(invalid(
                "deployment must be a lowercase DNS subdomain of at most 253 characters",
            ));
        }
        if let Some(c) = &self.container {
            if !is_dns_label(c) {
                return Err(invalid(
                    "container must be a lowercase DNS label of at most 63 characters",
                ));
            }
        }
        Ok(())
    }

    fn validate_command(&self, limits: &Limits) -> Result<(), ApiError> {
        if self.command.is_empty() {
            return Err(invalid("command is required (a non-empty list of strings)"));
        }
        if self.command.len() > limits.max_command_args {
            return Err(invalid(format!(
                "command has {} arguments; at most {} are allowed",
                self.command.len(),
                limits.max_command_args
            )));
        }
        let mut total = 0usize;
        for (i, a) in self.command.iter().enumerate() {
            if a.contains('\0') {
                return Err(invalid(format!("command argument {i} contains a NUL byte")));
            }
            if a.len() > limits.max_arg_bytes {
                return Err(invalid(format!(
                    "command argument {i} is {} bytes; at most {} are allowed",
                    a.len(),
                    limits.max_arg_bytes
                )));
            }
            total += a.len();
        }
        if total > limits.max_command_bytes {
            return Err(invalid(format!(
                "command is {total} bytes in all; at most {} are allowed",
                limits.max_command_bytes
            )));
        }
        Ok(())
    }
}

/// An output cap as asked (`None`: the default), checked against the maximum.
pub fn output_cap(asked: Option<i64>, stream: &str, limits: &Limits) -> Result<usize, ApiError> {
    let Some(v) = asked else {
        return Ok(limits.default_output_bytes);
    };
    match usize::try_from(v) {
        Ok(n) if n >= 1 && n <= limits.max_output_bytes => Ok(n),
        _ => Err(invalid(format!(
            "{stream}CapBytes must be between 1 and {}",
            limits.max_output_bytes
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ExecSpec {
        ExecSpec {
            project: "demo".into(),
            uid: "demo-uid".into(),
            deployment: "hello".into(),
            container: None,
            command: vec!["true".into()],
        }
    }

    fn refused(f: impl FnOnce(&mut ExecSpec), want: &str) {
        let mut s = spec();
        f(&mut s);
        let e = s.validate(&Limits::default()).unwrap_err();
        assert_eq!(e.code, Code::ExecInvalid);
        assert!(e.message.contains(want), "{want:?} not in {:?}", e.message);
    }

    #[test]
    fn a_good_request_passes() {
        spec().validate(&Limits::default()).unwrap();
        let mut s = spec();
        s.deployment = "a.b-c.d".into();
        s.container = Some("c-1".into());
        s.project = "p".repeat(63);
        s.uid = "u".repeat(256);
        s.command = vec!["x".repeat(8192), "y".repeat(8192)];
        s.validate(&Limits::default()).unwrap();
    }

    #[test]
    fn every_rule_is_enforced() {
        refused(|s| s.project = "Demo".into(), "project");
        refused(|s| s.project = "-demo".into(), "project");
        refused(|s| s.project = "demo-".into(), "project");
        refused(|s| s.project = "".into(), "project");
        refused(|s| s.project = "p".repeat(64), "project");
        refused(|s| s.project = "a.b".into(), "project");
        refused(|s| s.uid = "   ".into(), "uid");
        refused(|s| s.uid = "u".repeat(257), "uid");
        refused(|s| s.deployment = "Hello".into(), "deployment");
        refused(|s| s.deployment = "a..b".into(), "deployment");
        refused(
            |s| s.deployment = format!("{}.{}", "a".repeat(200), "b".repeat(60)),
            "deployment",
        );
        refused(|s| s.container = Some("Main".into()), "container");
        refused(|s| s.container = Some("".into()), "container");
        refused(|s| s.command = vec![], "command is required");
        refused(|s| s.command = vec!["a".into(); 65], "at most 64");
        refused(|s| s.command = vec!["a\0b".into()], "NUL");
        refused(|s| s.command = vec!["a".repeat(8193)], "at most 8192");
        refused(|s| s.command = vec!["a".repeat(8000); 5], "at most 32768");
    }

    #[test]
    fn limits_are_the_configured_ones() {
        let l = Limits {
            max_command_args: 2,
            ..Limits::default()
        };
        let mut s = spec();
        s.command = vec!["a".into(), "b".into(), "c".into()];
        assert!(s.validate(&l).unwrap_err().message.contains("at most 2"));
    }

    #[test]
    fn output_caps() {
        let l = Limits::default();
        assert_eq!(output_cap(None, "stdout", &l).unwrap(), 1 << 20);
        assert_eq!(output_cap(Some(1), "stdout", &l).unwrap(), 1);
        assert_eq!(output_cap(Some(1 << 20), "stdout", &l).unwrap(), 1 << 20);
        for bad in [0, -1, (1 << 20) + 1] {
            let e = output_cap(Some(bad), "stderr", &l).unwrap_err();
            assert_eq!(e.code, Code::ExecInvalid);
            assert!(e.message.starts_with("stderrCapBytes"), "{}", e.message);
        }
    }
}

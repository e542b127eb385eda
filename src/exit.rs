//! The binary's exit codes and the client-side error codes (docs/cli.md),
//! in a leaf module so every command (the client commands in `cli`, the
//! runner's `app-runner` and `install-self`, the daemon's start-up) can
//! name them without importing each other.
//!
//! The process exit codes: [`SUCCESS`] 0, [`FAILURE`] 1 (any other
//! failure), [`USAGE`] 2 (a usage or configuration error: nothing was
//! started), and [`OWN_ERROR`] 255 for the commands that pass a remote exit
//! code on (`exec`, `attach`). A failure of kubegate's own is printed as
//! `kubegate: CODE: message`, CODE one of [`codes`] or a daemon code.
//!
//! Also here: [`Parsed`], what a command line asks for, [`UsageError`],
//! [`utf8_args`], the command line as text or a usage error,
//! [`usage_text`], the one wording of the argument tokenizer's (lexopt's)
//! complaints, so every command says `--root needs a value` alike, and
//! [`usage_error`], how a top-level usage error is printed (by `cli` and by
//! the sim, which reads its own flags).
//!
//! Out of scope: the daemon's API codes and HTTP statuses (`api::Code`).
//! This module uses nothing of the crate.

/// Success (also `--help` and `--version`).
pub const SUCCESS: i32 = 0;
/// Any failure that is not a usage or configuration error.
pub const FAILURE: i32 = 1;
/// A usage or configuration error: bad flags, an unusable token or config
/// file, a malformed manifest; nothing was started.
pub const USAGE: i32 = 2;
/// `kubegate exec` and `kubegate attach` for their own errors, usage errors
/// included (as ssh does): the remote command's codes are 0..=255 and pass
/// through.
pub const OWN_ERROR: i32 = 255;

/// Client-side error codes, the CODE of `kubegate: CODE: message` (the
/// daemon's own are `api::Code`).
pub mod codes {
    /// Bad flags or arguments.
    pub const USAGE: &str = "USAGE";
    /// A token file or CA file that cannot be used, or no token at all.
    pub const CONFIG: &str = "CONFIG";
    /// The daemon could not be reached: DNS, TCP connect, TLS handshake
    /// (certificate verification included) or no answer before the deadline.
    pub const UNREACHABLE: &str = "UNREACHABLE";
    /// The server answered, but not as a kubegate daemon does (not a
    /// WebSocket, wrong subprotocol, a frame or body that does not decode).
    pub const PROTOCOL: &str = "PROTOCOL";
    /// The exec stream ended before the command's exit status came.
    pub const DISCONNECTED: &str = "DISCONNECTED";
    /// Reading our stdin or writing our stdout/stderr failed.
    pub const LOCAL_IO: &str = "LOCAL_IO";
    /// `kubegate dev`: the folder's `kubegate.toml` is missing, malformed,
    /// or declares something a session cannot have (a configuration
    /// error: exit 2).
    pub const MANIFEST: &str = "MANIFEST";
    /// A failure of kubegate itself (a thread or a signal handler that
    /// could not be started).
    pub const INTERNAL: &str = "INTERNAL";

    /// Whether CODE is a configuration error (exit [`super::USAGE`]).
    pub fn is_config(code: &str) -> bool {
        code == CONFIG || code == MANIFEST
    }
}

/// What a command line asks for once parsed: run the command, or print its
/// help (exit [`SUCCESS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<T> {
    Run(T),
    Help,
}

/// The message of a usage error the tokenizer found: `--root needs a
/// value`, `unknown option --bogus`, `unexpected argument "x"`.
pub fn usage_text(e: lexopt::Error) -> String {
    use lexopt::Error as E;
    match e {
        E::MissingValue { option: Some(o) } => format!("{o} needs a value"),
        E::MissingValue { option: None } => "a value is missing".to_string(),
        E::UnexpectedOption(o) => format!("unknown option {o}"),
        E::UnexpectedArgument(a) => format!("unexpected argument {a:?}"),
        E::UnexpectedValue { option, value } => {
            format!("{option} takes no value (got {value:?})")
        }
        E::NonUnicodeValue(v) => format!("{v:?} is not UTF-8 text"),
        other => other.to_string(),
    }
}

/// A usage error of a command whose flags are read before anything
/// starts (`cli::command`, `sim::args`, the workspace agent's): printed
/// by [`usage_error`] as `kubegate: message`, then the binary's usage (the
/// agent prints its own, after `kubegate workspace-agent: message`), exit
/// [`USAGE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

impl From<lexopt::Error> for UsageError {
    fn from(e: lexopt::Error) -> UsageError {
        UsageError(usage_text(e))
    }
}

/// The command line as UTF-8 text, for the commands that read theirs as
/// `String`s: the first argument that is not text is refused in the
/// tokenizer's words (`"\xFF" is not UTF-8 text`, [`usage_text`]).
pub fn utf8_args<I>(args: I) -> Result<Vec<String>, UsageError>
where
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString>,
{
    args.into_iter()
        .map(|a| {
            a.into()
                .into_string()
                .map_err(|a| lexopt::Error::NonUnicodeValue(a).into())
        })
        .collect()
}

/// Prints a top-level usage error as `kubegate: message`, a blank line and
/// `usage` (the binary's command list); the exit code ([`USAGE`]).
pub fn usage_error(message: &dyn std::fmt::Display, usage: &str) -> i32 {
    eprintln!("kubegate: {message}\n\n{usage}");
    USAGE
}

/// The exit code of a 0/1/2 command for a failure with error code CODE:
/// [`USAGE`] for a usage or configuration error, else [`FAILURE`].
pub fn for_code(code: &str) -> i32 {
    if code == codes::USAGE || codes::is_config(code) {
        USAGE
    } else {
        FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_and_configuration_errors_exit_2_others_1() {
        assert_eq!(for_code(codes::USAGE), 2);
        assert_eq!(for_code(codes::CONFIG), 2);
        assert_eq!(for_code(codes::MANIFEST), 2);
        assert_eq!(for_code(codes::UNREACHABLE), 1);
        assert_eq!(for_code("NOT_FOUND"), 1);
        assert_eq!(OWN_ERROR, 255);
    }

    #[test]
    fn the_tokenizers_complaints_in_our_words() {
        let complain = |args: &[&str]| {
            let mut p = lexopt::Parser::from_args(args.iter().copied());
            loop {
                match p.next() {
                    Ok(Some(lexopt::Arg::Long("root"))) => {
                        if let Err(e) = p.value() {
                            return usage_text(e);
                        }
                    }
                    Ok(Some(lexopt::Arg::Long("flag"))) => {}
                    Ok(Some(a)) => return usage_text(a.unexpected()),
                    Ok(None) => return String::new(),
                    Err(e) => return usage_text(e),
                }
            }
        };
        assert_eq!(complain(&["--root"]), "--root needs a value");
        assert_eq!(complain(&["--bogus"]), "unknown option --bogus");
        assert_eq!(complain(&["-x"]), "unknown option -x");
        assert_eq!(complain(&["x"]), "unexpected argument \"x\"");
        assert_eq!(complain(&["--flag=1"]), "--flag takes no value (got \"1\")");
    }

    #[test]
    fn an_argument_that_is_not_text_is_a_usage_error() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(utf8_args(["a", "é"]), Ok(vec!["a".into(), "é".into()]));
        let bad = [OsStr::new("exec"), OsStr::from_bytes(b"x\xffy")];
        assert_eq!(
            utf8_args(bad),
            Err(UsageError("\"x\\xFFy\" is not UTF-8 text".into()))
        );
    }
}

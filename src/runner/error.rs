//! The runner's failures (`app-runner` and `install-self`): a code from
//! [`crate::exit::codes`] and a message, printed as `kubegate: CODE:
//! message`, and the exit code each one means.

use crate::exit::{self, codes};
use std::fmt;

/// One failure of the runner's own (not the program's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerError {
    /// One of [`codes`]: `USAGE`, `CONFIG`, `LOCAL_IO` or `INTERNAL`.
    pub code: &'static str,
    pub message: String,
}

impl RunnerError {
    pub fn new(code: &'static str, message: impl Into<String>) -> RunnerError {
        RunnerError {
            code,
            message: message.into(),
        }
    }

    /// Bad flags or arguments.
    pub fn usage(message: impl Into<String>) -> RunnerError {
        RunnerError::new(codes::USAGE, message)
    }

    /// Something the command line or the environment names cannot be used
    /// (the workspace root, the inspect address).
    pub fn config(message: impl Into<String>) -> RunnerError {
        RunnerError::new(codes::CONFIG, message)
    }

    pub fn is_usage(&self) -> bool {
        self.code == codes::USAGE
    }

    pub fn is_config(&self) -> bool {
        codes::is_config(self.code)
    }

    /// [`exit::USAGE`] for usage and configuration errors, else
    /// [`exit::FAILURE`].
    pub fn exit_code(&self) -> i32 {
        exit::for_code(self.code)
    }
}

impl fmt::Display for RunnerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for RunnerError {}

impl From<lexopt::Error> for RunnerError {
    fn from(e: lexopt::Error) -> RunnerError {
        RunnerError::usage(exit::usage_text(e))
    }
}

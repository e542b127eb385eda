//! The driver's failures: which side failed, and a message for people.
//! Any of them before the soak runs is a set-up error (exit 2); during the
//! soak they are counted (a refused exec, a session that did not start).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SoakError {
    /// The command line: printed with the usage.
    Usage(String),
    /// A connection, read or write failed (`connect: …`, `read: …`).
    Io(String),
    /// The daemon or the sim answered, but not what the soak needs: an
    /// error status or code, a head or body that does not parse.
    Answer(String),
    /// The sim or the daemon is not in the state a soak starts from (the
    /// exec target, the fault endpoint, the sim client).
    Setup(String),
}

impl fmt::Display for SoakError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SoakError::Usage(m) | SoakError::Io(m) | SoakError::Answer(m) | SoakError::Setup(m) => {
                f.write_str(m)
            }
        }
    }
}

impl std::error::Error for SoakError {}

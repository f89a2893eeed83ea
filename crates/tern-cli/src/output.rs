//! Standard output for the commands, and how a command fails.
//!
//! `println!` panics when standard output cannot be written; the commands write through
//! [`Output`] instead, which turns a failed write into a [`Failure`]: a pipe whose reader has
//! gone (`tern scan DB | head`) ends the command quietly, any other error (a full disk) is an
//! error naming what was being written.

use serde::Serialize;
use std::fmt::Display;
use std::io::{self, BufWriter, Write};

/// Why a command stopped before it finished.
#[derive(Debug)]
pub enum Failure {
    /// An error, printed as `tern: MESSAGE` (exit status 1).
    Error(String),
    /// The reader of standard output went away (a closed pipe): the command stops writing and
    /// exits with status 0, printing nothing.
    ReaderGone,
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::Error(message)
    }
}

impl Failure {
    /// What a failed write of `what` ("the output", "the dump") means.
    pub fn writing(what: &str, e: io::Error) -> Failure {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Failure::ReaderGone
        } else {
            Failure::Error(format!("writing {what}: {e}"))
        }
    }
}

/// Standard output, buffered: [`Output::finish`] flushes it (dropping it unfinished flushes
/// too, ignoring errors, as on a path that already failed).
pub struct Output(BufWriter<io::StdoutLock<'static>>);

impl Output {
    pub fn new() -> Output {
        Output(BufWriter::new(io::stdout().lock()))
    }

    /// Writes `text` and a newline.
    pub fn line(&mut self, text: impl Display) -> Result<(), Failure> {
        writeln!(self.0, "{text}").map_err(|e| Failure::writing("the output", e))
    }

    /// Flushes what was written.
    pub fn finish(mut self) -> Result<(), Failure> {
        self.0.flush().map_err(|e| Failure::writing("the output", e))
    }
}

/// Writes one line to standard output.
pub fn line(text: impl Display) -> Result<(), Failure> {
    let mut out = Output::new();
    out.line(text)?;
    out.finish()
}

/// Writes `value` to standard output as one line of JSON.
pub fn json(value: &impl Serialize) -> Result<(), Failure> {
    line(serde_json::to_string(value).map_err(|e| format!("encoding the output as JSON: {e}"))?)
}

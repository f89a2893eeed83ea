//! Opening a database for the operations commands, with messages that say what to do.

use std::path::Path;
use tern::{Db, Options};

/// Whether the command may create a database that does not exist yet.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Create {
    /// `tern load`: a missing directory, or an empty one, becomes a new database.
    IfMissing,
    /// Every other command: the directory must hold a database.
    No,
}

/// Opens the database at `path` with default options. Where it holds no database, only
/// [`Create::IfMissing`] goes on, and only if `path` is missing or an empty directory: files
/// that are not a database are never written over.
pub fn open(path: &Path, create: Create) -> Result<Db, String> {
    let shown = path.display();
    if !is_database(path)? {
        let missing_or_empty = match std::fs::read_dir(path) {
            Ok(mut entries) => entries.next().is_none(),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound, // else a file, not a directory
        };
        match create {
            Create::No => return Err(format!("{shown} is not a database directory")),
            Create::IfMissing if !missing_or_empty => {
                return Err(format!(
                    "{shown} is not a database directory, nor an empty one (load creates a database only in a \
                     missing or empty directory; nothing was written)"
                ))
            }
            Create::IfMissing => {}
        }
    }
    Db::open(path, Options::default()).map_err(|e| match e {
        tern::Error::Locked { .. } => format!("{shown}: {e} (another process has it open: close it first)"),
        e => format!("{shown}: {e}"),
    })
}

/// Whether `path` is a directory holding a tern database (as `tern check`, `backup` and
/// `compact` decide it).
fn is_database(path: &Path) -> Result<bool, String> {
    Ok(path.is_dir() && tern::recovery::is_database(path).map_err(|e| format!("{}: {e}", path.display()))?)
}

/// Opens the database at `path`, runs `f` on it and closes it, whether `f` failed or not; the
/// first failure is returned (`f`'s, else closing's: a final checkpoint that could not be
/// written).
pub fn with<T, E: From<String>>(path: &Path, create: Create, f: impl FnOnce(&Db) -> Result<T, E>) -> Result<T, E> {
    let db = open(path, create)?;
    let result = f(&db);
    let closed = db.close().map_err(|e| format!("{}: closing: {e}", path.display()));
    let value = result?;
    Ok(closed.map(|()| value)?)
}

/// A progress spinner on standard error, drawn only when it is a terminal.
pub fn progress(what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} {human_pos} entries ({per_sec}, {elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.set_message(what.to_string());
    bar
}

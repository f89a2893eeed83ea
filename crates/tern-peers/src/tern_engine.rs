//! tern, through its public `Db` API: a read is `begin_read` + `get` + commit; a write
//! transaction is `begin` + puts + `commit`.

use crate::{Engine, PeerError, Result, Session};
use tern::{Db, Error, Options, Txn};

/// tern, in memory (no durability yet).
pub struct TernEngine {
    db: Db,
}

impl TernEngine {
    pub fn open() -> Result<TernEngine> {
        Ok(TernEngine { db: Db::open_temporary(Options::default()).map_err(failed)? })
    }

    /// The database, for checks.
    pub fn db(&self) -> &Db {
        &self.db
    }
}

fn failed(e: Error) -> PeerError {
    match e {
        Error::Conflict | Error::Deadlock | Error::TxnFailed { .. } | Error::LockTimeout => PeerError::Retry,
        e => PeerError::Failed(e.to_string()),
    }
}

impl Engine for TernEngine {
    fn name(&self) -> &'static str {
        "tern"
    }

    fn config(&self) -> String {
        let o = self.db.options();
        format!(
            "tern {}: in memory (no durability yet), {} KiB pages, snapshot isolation, one transaction per operation",
            env!("CARGO_PKG_VERSION"),
            o.tree.page_size / 1024
        )
    }

    fn session(&self) -> Result<Box<dyn Session + '_>> {
        Ok(Box::new(TernSession { db: &self.db, txn: None }))
    }
}

struct TernSession<'a> {
    db: &'a Db,
    txn: Option<Txn<'a>>,
}

impl<'a> TernSession<'a> {
    fn txn(&mut self) -> Result<&mut Txn<'a>> {
        self.txn.as_mut().ok_or_else(|| PeerError::Failed("no transaction begun".into()))
    }
}

impl Session for TernSession<'_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let t = self.db.begin_read().map_err(failed)?;
        t.get_into(key, out).map_err(failed)
    }

    fn scan(&mut self, start: &[u8], count: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let t = self.db.begin_read().map_err(failed)?;
        let mut seen = 0;
        for (k, v) in t.range(start..).map_err(failed)?.take(count) {
            visit(&k, &v);
            seen += 1;
        }
        Ok(seen)
    }

    fn begin(&mut self) -> Result<()> {
        self.txn = Some(self.db.begin().map_err(failed)?);
        Ok(())
    }

    fn txn_get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.txn()?.get_into(key, out).map_err(failed)
    }

    fn txn_put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.txn()?.put(key, value).map_err(failed)
    }

    fn commit(&mut self) -> Result<()> {
        let t = self.txn.take().ok_or_else(|| PeerError::Failed("no transaction begun".into()))?;
        t.commit().map_err(failed)
    }

    fn abort(&mut self) {
        if let Some(t) = self.txn.take() {
            t.abort();
        }
    }
}

//! Latch classes: one name per kind of latch ("btree.node", "lock.partition", ...), carrying the
//! spin configuration its latches wait with and the key under which their counters are summed.
//!
//! A latch stores only its class's one-byte id, so a `Mutex<()>` stays two bytes. The
//! configuration lives in a global table of atomics, read once per contended acquisition (never on
//! the uncontended path) and changeable at run time, which is what lets a benchmark switch a
//! class between policies between two measurements of the same latches.

use super::spin::{SpinConfig, SpinPolicy};
use crate::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex as StdMutex;

/// How many classes the table holds, `default` included.
pub const MAX_CLASSES: usize = 32;

/// A kind of latch. Cheap to copy; obtain one with [`LatchClass::register`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LatchClass(u8);

/// Names of registered classes; index = class id. Only touched off the hot path.
static NAMES: StdMutex<Vec<&'static str>> = StdMutex::new(Vec::new());

/// Each class's [`SpinConfig`], packed (see `SpinConfig::pack`).
static CONFIGS: [AtomicU64; MAX_CLASSES] = [const { AtomicU64::new(SpinConfig::DEFAULT.pack()) }; MAX_CLASSES];

impl LatchClass {
    /// The class of latches created without one.
    pub const DEFAULT: LatchClass = LatchClass(0);

    /// Returns the class called `name`, registering it on first use.
    ///
    /// Registering the same name twice returns the same class. Fails with
    /// [`Error::TooManyLatchClasses`] once [`MAX_CLASSES`] distinct names exist.
    pub fn register(name: &'static str) -> Result<LatchClass> {
        let mut names = lock_names();
        if let Some(i) = names.iter().position(|n| *n == name) {
            return Ok(LatchClass(i as u8));
        }
        if names.len() == MAX_CLASSES {
            return Err(Error::TooManyLatchClasses { name: name.to_owned(), max: MAX_CLASSES });
        }
        names.push(name);
        Ok(LatchClass((names.len() - 1) as u8))
    }

    /// Every registered class, `default` first.
    pub fn all() -> Vec<LatchClass> {
        (0..lock_names().len()).map(|i| LatchClass(i as u8)).collect()
    }

    /// The name this class was registered with.
    pub fn name(self) -> &'static str {
        lock_names()[self.index()]
    }

    /// The spin configuration latches of this class wait with.
    pub fn config(self) -> SpinConfig {
        SpinConfig::unpack(CONFIGS[self.index()].load(Relaxed))
    }

    /// Changes how latches of this class wait from their next contended acquisition on.
    pub fn set_config(self, config: SpinConfig) -> Result<()> {
        config.validate()?;
        CONFIGS[self.index()].store(config.pack(), Relaxed);
        Ok(())
    }

    /// Shorthand for changing only the policy.
    pub fn set_policy(self, policy: SpinPolicy) -> Result<()> {
        self.set_config(SpinConfig { policy, ..self.config() })
    }

    /// The index of this class in the fixed tables; always below [`MAX_CLASSES`].
    #[inline(always)]
    pub(crate) fn index(self) -> usize {
        self.0 as usize % MAX_CLASSES
    }
}

/// Applies `config` to every registered class (an engine-wide switch).
pub fn set_all_configs(config: SpinConfig) -> Result<()> {
    LatchClass::all().into_iter().try_for_each(|class| class.set_config(config))
}

/// Changes only the policy of every registered class, each keeping its other settings (an
/// engine-wide A/B switch of the policy alone).
pub fn set_all_policies(policy: SpinPolicy) -> Result<()> {
    LatchClass::all().into_iter().try_for_each(|class| class.set_policy(policy))
}

fn lock_names() -> std::sync::MutexGuard<'static, Vec<&'static str>> {
    // A panic while holding this lock cannot leave the vector half-updated (push is the only
    // mutation), so a poisoned lock is still safe to use.
    let mut names = NAMES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if names.is_empty() {
        names.push("default");
    }
    names
}

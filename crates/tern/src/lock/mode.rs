//! Lock modes, their compatibility matrix, and the order among them.

use std::fmt;
use std::str::FromStr;

/// A lock mode: the five modes of multi-granularity locking (Gray et al., 1976).
///
/// Intention modes (`IS`, `IX`, `SIX`) are taken on a container (a table, a key range) before
/// locking something inside it in `S` or `X`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockMode {
    /// Intention shared: will take `S` locks inside.
    IS = 0,
    /// Intention exclusive: will take `X` locks inside.
    IX = 1,
    /// Shared: read.
    S = 2,
    /// Shared + intention exclusive: read all, write some inside.
    SIX = 3,
    /// Exclusive: write.
    X = 4,
}

/// `COMPAT[a] & (1 << b) != 0` iff a holder in mode `a` and one in mode `b` can coexist.
const COMPAT: [u8; 5] = [
    //  X SIX S IX IS (bit 4..0)
    0b01111, // IS: with IS, IX, S, SIX
    0b00011, // IX: with IS, IX
    0b00101, // S: with IS, S
    0b00001, // SIX: with IS
    0b00000, // X: with nothing
];

/// `JOIN[a][b]`: the weakest mode at least as strong as both (the supremum in the mode lattice
/// IS < IX, S < SIX < X). A holder of `a` asking for `b` ends up holding `JOIN[a][b]`.
const JOIN: [[LockMode; 5]; 5] = {
    use LockMode::*;
    [
        [IS, IX, S, SIX, X],   // IS
        [IX, IX, SIX, SIX, X], // IX
        [S, SIX, S, SIX, X],   // S
        [SIX, SIX, SIX, SIX, X],
        [X, X, X, X, X],
    ]
};

impl LockMode {
    /// Every mode, weakest first.
    pub const ALL: [LockMode; 5] = [LockMode::IS, LockMode::IX, LockMode::S, LockMode::SIX, LockMode::X];

    /// Whether a holder in `self` and another holder in `other` can coexist.
    #[inline]
    pub fn compatible(self, other: LockMode) -> bool {
        COMPAT[self as usize] & (1 << other as u8) != 0
    }

    /// The weakest mode that grants everything `self` and `other` grant.
    #[inline]
    pub fn join(self, other: LockMode) -> LockMode {
        JOIN[self as usize][other as usize]
    }

    /// Whether holding `self` already grants `other` (a re-entrant request needs no conversion).
    #[inline]
    pub fn covers(self, other: LockMode) -> bool {
        self.join(other) == self
    }

    /// The modes whose holders only read at this level (`IS`, `S`): the ones tern's scalable
    /// shared mode can grant without touching the object's shared state.
    #[inline]
    pub(crate) fn is_read(self) -> bool {
        matches!(self, LockMode::IS | LockMode::S)
    }

    fn name(self) -> &'static str {
        match self {
            LockMode::IS => "IS",
            LockMode::IX => "IX",
            LockMode::S => "S",
            LockMode::SIX => "SIX",
            LockMode::X => "X",
        }
    }
}

impl fmt::Display for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LockMode {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<LockMode> {
        LockMode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| crate::Error::InvalidArgument(format!("unknown lock mode {s:?} (IS, IX, S, SIX or X)")))
    }
}

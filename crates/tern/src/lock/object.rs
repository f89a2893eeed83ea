//! Lockable objects: byte strings, or 64-bit ids (the fast path: no allocation, exact match).

/// What a lock names. Ids and byte strings are separate name spaces: `Id(1)` and the bytes
/// `[0, 0, 0, 0, 0, 0, 0, 1]` are different objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockObject<'a> {
    /// A 64-bit id (a page id, a table id, a hash of a key the caller computed).
    Id(u64),
    /// A byte string (a key, a table name).
    Bytes(&'a [u8]),
}

impl From<u64> for LockObject<'_> {
    fn from(id: u64) -> Self {
        LockObject::Id(id)
    }
}

impl<'a> From<&'a [u8]> for LockObject<'a> {
    fn from(b: &'a [u8]) -> Self {
        LockObject::Bytes(b)
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for LockObject<'a> {
    fn from(b: &'a [u8; N]) -> Self {
        LockObject::Bytes(b)
    }
}

impl<'a> From<&'a str> for LockObject<'a> {
    fn from(s: &'a str) -> Self {
        LockObject::Bytes(s.as_bytes())
    }
}

impl<'a> From<&'a Vec<u8>> for LockObject<'a> {
    fn from(b: &'a Vec<u8>) -> Self {
        LockObject::Bytes(b)
    }
}

/// Longest byte-string name stored inside its entry (longer ones get their own allocation).
const INLINE: usize = 23;

/// An object's name as the lock table stores it. Short byte strings sit inline: every reader of
/// a hot object compares its key, and a separate small allocation would share cache lines with
/// whatever its neighbours are (measured: shared-mode throughput varied by 1.5x from run to run
/// with the key in its own allocation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Key {
    Id(u64),
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Key {
    pub(crate) fn new(o: LockObject<'_>) -> Key {
        match o {
            LockObject::Id(id) => Key::Id(id),
            LockObject::Bytes(b) if b.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..b.len()].copy_from_slice(b);
                Key::Inline { len: b.len() as u8, bytes }
            }
            LockObject::Bytes(b) => Key::Heap(b.into()),
        }
    }

    #[inline]
    pub(crate) fn matches(&self, o: LockObject<'_>) -> bool {
        match (self, o) {
            (Key::Id(a), LockObject::Id(b)) => *a == b,
            (Key::Inline { len, bytes }, LockObject::Bytes(b)) => bytes_eq(&bytes[..usize::from(*len)], b),
            (Key::Heap(a), LockObject::Bytes(b)) => bytes_eq(a, b),
            _ => false,
        }
    }

    /// Renames to `o`, reusing a heap allocation of the right length (entries are recycled).
    pub(crate) fn set(&mut self, o: LockObject<'_>) {
        match (&mut *self, o) {
            (Key::Heap(a), LockObject::Bytes(b)) if a.len() == b.len() => a.copy_from_slice(b),
            _ => *self = Key::new(o),
        }
    }
}

/// A 64-bit finalizer (Stafford's mix 13, as in SplitMix64): every input bit affects every
/// output bit, so both the partition (high bits) and the in-partition table (low bits) spread.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The object's hash. Not keyed: lock names come from the embedding program, not from an
/// adversary choosing collisions.
#[inline]
pub(crate) fn hash(o: LockObject<'_>) -> u64 {
    match o {
        LockObject::Id(id) => mix64(id),
        LockObject::Bytes(b) => {
            let mut h = 0x9e37_79b9_7f4a_7c15u64 ^ b.len() as u64;
            let mut chunks = b.chunks_exact(8);
            for c in &mut chunks {
                let w = u64::from_le_bytes(c.try_into().expect("chunks_exact(8) yields 8 bytes"));
                h = (h.rotate_left(23) ^ w).wrapping_mul(0x2127_599b_f432_5c37);
            }
            let rest = chunks.remainder();
            let tail = if rest.is_empty() {
                0
            } else if b.len() >= 8 {
                // The last 8 bytes (overlapping the chunks): one load instead of a byte loop.
                u64::from_le_bytes(b[b.len() - 8..].try_into().expect("8 bytes"))
            } else {
                rest.iter().rev().fold(0u64, |t, &x| t << 8 | u64::from(x))
            };
            // The tag bit keeps `Bytes` from colliding systematically with `Id`.
            mix64(h ^ tail ^ (1 << 63))
        }
    }
}

/// Byte-string equality, inline for the 8- to 16-byte keys locks usually name (two word
/// compares, overlapping; a library `memcmp` call costs more than the comparison there).
#[inline]
fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
        return word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8);
    }
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_exactly_their_own_bytes() {
        for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 23, 24, 40] {
            let a: Vec<u8> = (0..len as u8).collect();
            let k = Key::new(LockObject::Bytes(&a));
            assert!(k.matches(LockObject::Bytes(&a)), "{len}");
            for i in 0..len {
                let mut b = a.clone();
                b[i] ^= 0x80;
                assert!(!k.matches(LockObject::Bytes(&b)), "{len} {i}");
            }
            let mut longer = a.clone();
            longer.push(0);
            assert!(!k.matches(LockObject::Bytes(&longer)));
            assert!(!k.matches(LockObject::Id(0)));
            let mut renamed = Key::new(LockObject::Id(3));
            renamed.set(LockObject::Bytes(&a));
            assert_eq!(renamed, k);
            renamed.set(LockObject::Bytes(&longer));
            assert!(renamed.matches(LockObject::Bytes(&longer)) && !renamed.matches(LockObject::Bytes(&a)));
        }
        assert_ne!(hash(LockObject::Bytes(b"abc")), hash(LockObject::Bytes(b"abd")));
        assert_ne!(hash(LockObject::Bytes(b"")), hash(LockObject::Bytes(&[0])));
    }
}

//! The BLAKE3 key-derivation contexts idemkit hashes under, with each context's
//! key computed ahead of time.
//!
//! `Hasher::new_derive_key(context)` hashes the context string on every call: one
//! more compression than the material itself needs, which is most of the work
//! for a short input such as a record id. The keys below are that hash, fixed
//! at build time; a unit test recomputes each from its context string, so a
//! changed string cannot silently keep a stale key.

use blake3::hazmat::HasherExt;

/// A derivation context: its string (the domain separation every digest of
/// this kind uses) and the string's context key.
pub(crate) struct Context {
    #[cfg_attr(
        not(test),
        allow(dead_code, reason = "checked against the key in tests")
    )]
    pub(crate) name: &'static str,
    key: [u8; 32],
}

impl Context {
    /// A hasher in key-derivation mode under this context: the same digests as
    /// `blake3::Hasher::new_derive_key(self.name)`.
    pub(crate) fn hasher(&self) -> blake3::Hasher {
        blake3::Hasher::new_from_context_key(&self.key)
    }
}

/// Scheme-1 request fingerprints (operation and body).
pub(crate) const FINGERPRINT_V1: Context = Context {
    name: crate::fingerprint::CONTEXT,
    key: [
        67, 253, 154, 65, 177, 133, 239, 116, 71, 130, 148, 8, 120, 57, 226, 201, 143, 110, 123,
        124, 163, 197, 208, 88, 164, 135, 241, 244, 145, 19, 100, 156,
    ],
};

/// Scheme-2 request fingerprints (the request line over the scheme-1 one).
pub(crate) const FINGERPRINT_V2: Context = Context {
    name: crate::fingerprint::CONTEXT_V2,
    key: [
        182, 124, 158, 87, 42, 17, 162, 248, 131, 198, 203, 98, 86, 9, 228, 32, 59, 243, 157, 78,
        141, 131, 219, 41, 55, 186, 157, 75, 218, 129, 166, 87,
    ],
};

/// Keys derived from a run id and a step id (`IdempotencyKey::derive`).
pub(crate) const ACTION_KEY: Context = Context {
    name: "idemkit 2026-11 action key v1",
    key: [
        24, 242, 90, 72, 150, 12, 130, 132, 194, 247, 59, 94, 226, 203, 188, 16, 40, 38, 51, 133,
        102, 41, 62, 93, 248, 214, 69, 106, 45, 212, 247, 179,
    ],
};

/// A record id's log reference (`RecordId::log_ref`).
pub(crate) const LOG_REF: Context = Context {
    name: "idemkit 2026-11 record log reference v1",
    key: [
        146, 79, 9, 159, 40, 47, 37, 128, 241, 51, 182, 241, 147, 125, 97, 213, 40, 156, 120, 240,
        223, 92, 107, 71, 161, 108, 138, 217, 96, 192, 197, 238,
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_context_key_is_the_hash_of_its_string() {
        for context in [&FINGERPRINT_V1, &FINGERPRINT_V2, &ACTION_KEY, &LOG_REF] {
            assert_eq!(
                context.key,
                blake3::hazmat::hash_derive_key_context(context.name),
                "{}",
                context.name
            );
            let mut ours = context.hasher();
            ours.update(b"material");
            assert_eq!(
                *ours.finalize().as_bytes(),
                blake3::derive_key(context.name, b"material"),
                "{}",
                context.name
            );
        }
    }
}

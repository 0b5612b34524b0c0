//! Arbitrary stored bytes: decoding never panics, and a decoded record re-encodes
//! to exactly the bytes it came from when they are in the current format (the
//! codec refuses non-canonical spellings), which decode again to the same record.
//! Bytes in an older format re-encode in the current one, to the same record.
#![no_main]

use idemkit_core::record::{FORMAT_VERSION, Record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = Record::decode(data) {
        let bytes = record.encode();
        if data.first() == Some(&FORMAT_VERSION) {
            assert_eq!(bytes, data, "a decoded record must re-encode to its bytes");
        }
        assert_eq!(Record::decode(&bytes).as_ref(), Ok(&record));
        // Whatever a hostile record holds, the machine's read-only helpers are total.
        let now = idemkit_core::UnixMillis::from_millis(u64::from_le_bytes(
            record.fingerprint.as_bytes()[..8].try_into().unwrap_or([0; 8]),
        ));
        let _ = record.gc_due_at();
        let _ = record.is_unresolved(now);
        let _ = idemkit_core::machine::gc(&record, now);
    }
});

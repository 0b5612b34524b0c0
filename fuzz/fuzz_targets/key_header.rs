//! `IdempotencyKey::parse_header` never panics, and an accepted key
//! round-trips through its Structured-Field header form.
#![no_main]

use idemkit_core::IdempotencyKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = IdempotencyKey::parse_header(data) {
        let header = key.to_header_value();
        assert_eq!(
            IdempotencyKey::parse_header(header.as_bytes()),
            Ok(key.clone())
        );
        assert_eq!(IdempotencyKey::new(key.as_str()), Ok(key));
    }
});

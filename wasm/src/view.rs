//! A record's read-only view, written [flat](crate::flat), for `decodeRecord`
//! and a completion's answer (`recordView` in `wasm/js/api.js` names the
//! fields and reads them in the same order).
//!
//! The fields come in the order of the `RecordView` type in `index.d.ts`:
//! `fingerprint, fingerprintScheme, effect, state, attempt, lastToken` (as
//! [`Flat::token`] writes it), `steps`, `createdAt, updatedAt, replayUntil, keepUntil`, then the
//! state's own: `owner, leaseExpiresAt` (running); `response, completedAt`
//! (completed); `reason, since` (unknown); `releasedAt` (released).

use idemkit_core::record::{EffectKind, Record, RecordState};

use crate::flat::Flat;

/// The view of `record`.
#[must_use]
pub fn record_view(record: &Record) -> Flat {
    let mut out = Flat::new();
    write_record_view(&mut out, record);
    out
}

/// Writes the view of `record` into `out`, after what is there (a
/// completion's decision carries the view of the record it writes).
pub fn write_record_view(out: &mut Flat, record: &Record) {
    out.string_with(|text| idemkit_core::hex::push_lower(text, record.fingerprint.as_bytes()));
    out.number(f64::from(record.fingerprint_scheme));
    out.string(match record.effect {
        EffectKind::Local => "local",
        EffectKind::External => "external",
    });
    out.string(record.state.name().as_str());
    out.number(f64::from(record.attempt));
    out.token(record.last_token.get());
    out.steps(&record.steps);
    out.millis(record.created_at);
    out.millis(record.updated_at);
    out.optional_millis(record.replay_until);
    out.optional_millis(record.keep_until);
    match &record.state {
        RecordState::Running { lease } => {
            out.string(&lease.owner);
            out.millis(lease.expires_at);
        }
        RecordState::Completed {
            response,
            completed_at,
        } => {
            out.response(response);
            out.millis(*completed_at);
        }
        RecordState::Unknown { reason, since } => {
            out.string(&reason.to_string());
            out.millis(*since);
        }
        RecordState::Released { at } => out.millis(*at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemkit_core::UnixMillis;
    use idemkit_core::machine::{self, ClaimRequest, Op, Policy};
    use idemkit_core::record::{FencingToken, StoredResponse};
    use idemkit_core::{Fingerprint, RequestFingerprint};

    fn at(ms: u64) -> UnixMillis {
        UnixMillis::from_millis(ms)
    }

    fn running(owner: &str) -> Record {
        let op = Op::Claim {
            request: ClaimRequest {
                fingerprint: RequestFingerprint::body_only(Fingerprint::from_bytes([7; 32])),
                owner: owner.to_owned(),
            },
            token_floor: 0,
        };
        match machine::apply(None, &op, &Policy::default(), at(1_000)) {
            Ok(machine::Decision {
                write: machine::Write::Put(record),
                ..
            }) => record,
            other => panic!("a new claim writes a record: {other:?}"),
        }
    }

    /// The view read back as JavaScript reads it: each number, and each string
    /// cut out of the text by its UTF-16 length.
    struct Reader<'v> {
        view: &'v Flat,
        next: usize,
        at: usize,
    }

    impl<'v> Reader<'v> {
        fn new(view: &'v Flat) -> Self {
            Reader {
                view,
                next: 0,
                at: 0,
            }
        }

        fn number(&mut self) -> f64 {
            let n = self.view.numbers.get(self.next).copied();
            self.next += 1;
            n.unwrap_or_else(|| panic!("no number {} in {:?}", self.next - 1, self.view))
        }

        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        fn string(&mut self) -> String {
            let units = self.number() as usize;
            let utf16: Vec<u16> = self
                .view
                .text
                .encode_utf16()
                .skip(self.at)
                .take(units)
                .collect();
            self.at += units;
            String::from_utf16(&utf16).unwrap_or_else(|e| panic!("{e}"))
        }

        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        fn bytes(&mut self) -> Vec<u8> {
            let (start, end) = (self.number() as usize, self.number() as usize);
            self.view.bytes.get(start..end).unwrap_or_default().to_vec()
        }

        fn done(&self) -> bool {
            self.next == self.view.numbers.len() && self.at == self.view.text.encode_utf16().count()
        }
    }

    /// The fields before `updatedAt` of a record of [`running`]'s claim (no
    /// steps, first attempt, created at 1 000) now in `state`.
    fn read_first_fields(read: &mut Reader<'_>, state: &str) {
        assert_eq!(read.string(), "07".repeat(32), "fingerprint");
        assert_eq!(read.number(), 1.0, "fingerprintScheme");
        assert_eq!(read.string(), "external");
        assert_eq!(read.string(), state);
        assert_eq!(read.number(), 1.0, "attempt");
        assert_eq!(read.number(), 1.0, "lastToken, a number below 2^53");
        assert_eq!(read.number(), 0.0, "no steps");
        assert_eq!(read.number(), 1_000.0, "createdAt");
    }

    #[test]
    fn a_running_record_names_its_owner_and_measures_its_strings_in_utf16() {
        let owner = "worker \"7\"\\\n\u{1}é😀";
        let view = record_view(&running(owner));
        let mut read = Reader::new(&view);
        read_first_fields(&mut read, "running");
        assert_eq!(read.number(), 1_000.0, "updatedAt");
        assert!(read.number().is_nan(), "no replayUntil");
        assert!(read.number().is_nan(), "no keepUntil");
        assert_eq!(read.string(), owner, "owner, é one unit and the emoji two");
        assert!(read.number() > 1_000.0, "leaseExpiresAt");
        assert!(read.done(), "nothing left over: {view:?}");
        assert!(view.bytes.is_empty());
    }

    #[test]
    fn a_completed_record_points_into_the_bytes_for_its_body_and_header_values() {
        let record = running("w");
        let op = Op::Complete {
            token: FencingToken::new(1).unwrap_or_else(|| panic!("token 1")),
            response: StoredResponse {
                status: 201,
                headers: vec![
                    ("content-type".into(), b"application/json".to_vec()),
                    ("location".into(), b"/p/1".to_vec()),
                ],
                body: Some(b"{\"id\":1}".to_vec()),
                resource_ref: Some("p_1".into()),
            },
        };
        let done = match machine::apply(Some(&record), &op, &Policy::default(), at(2_000)) {
            Ok(machine::Decision {
                write: machine::Write::Put(record),
                ..
            }) => record,
            other => panic!("completion writes: {other:?}"),
        };
        let view = record_view(&done);
        let mut read = Reader::new(&view);
        read_first_fields(&mut read, "completed");
        assert_eq!(read.number(), 2_000.0, "updatedAt");
        assert!(read.number() > 2_000.0, "replayUntil");
        assert!(read.number() > 2_000.0, "keepUntil");
        assert_eq!(read.number(), 201.0, "status");
        assert_eq!(read.number(), 2.0, "two headers");
        assert_eq!(read.string(), "content-type");
        assert_eq!(read.bytes(), b"application/json");
        assert_eq!(read.string(), "location");
        assert_eq!(read.bytes(), b"/p/1");
        assert_eq!(read.number(), 1.0, "a body");
        assert_eq!(read.bytes(), b"{\"id\":1}");
        assert_eq!(read.string(), "p_1", "resourceRef");
        assert_eq!(read.number(), 2_000.0, "completedAt");
        assert!(read.done(), "nothing left over: {view:?}");
    }
}

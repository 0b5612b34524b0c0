//! [`Route`]: what one `createIdempotency` needs on every request, held in
//! WebAssembly so a request crosses the boundary as few times as possible.
//!
//! The free functions ([`apply`](crate::apply), [`fingerprint`](crate::fingerprint))
//! take their policy and fingerprint options as JavaScript values on every call
//! and hand the fingerprint back as hex, to be parsed again by the claim. A
//! `Route` parses the policy and builds the fingerprint specs once; a claim is
//! one call to [`fingerprint`](Route::fingerprint) (raw bytes, no hex) and one to
//! [`claim`](Route::claim).

use std::borrow::Cow;

use idemkit_core::fingerprint::{
    ContentKind, FingerprintSpec, RequestFingerprint, RequestLine, SCHEME_REQUEST_LINE,
};
use idemkit_core::http::{self, Outcome};
use idemkit_core::json::CanonicalizeOptions;
use idemkit_core::machine::{Answer, ClaimOutcome, ClaimRequest, Op, Policy};
use idemkit_core::record::StoredResponse;
use idemkit_core::{Fingerprint, IdempotencyKey, LogRef, Scope};
use wasm_bindgen::prelude::*;

use crate::interop::{self, JsResult};

/// One route's policy and fingerprint rules (see the module documentation).
#[wasm_bindgen]
pub struct Route {
    operation: String,
    policy: Policy,
    /// The specs for JSON, form and raw bodies, in that order: a request's
    /// content type picks one.
    specs: [FingerprintSpec; 3],
    rules: Rules,
}

/// The fingerprint options a route was made with.
struct Rules {
    schema_version: u32,
    include: Vec<String>,
    exclude: Vec<String>,
    json: CanonicalizeOptions,
    ignore_query: bool,
    ignore_query_params: Vec<String>,
}

impl Rules {
    fn spec(&self, content: ContentKind) -> JsResult<FingerprintSpec> {
        let mut spec = FingerprintSpec::new(content)
            .schema_version(self.schema_version)
            .json_options(self.json.clone());
        for pointer in &self.include {
            spec = spec.include(pointer).map_err(interop::error)?;
        }
        for pointer in &self.exclude {
            spec = spec.exclude(pointer).map_err(interop::error)?;
        }
        for name in &self.ignore_query_params {
            spec = spec.ignore_query_param(name);
        }
        Ok(if self.ignore_query {
            spec.ignore_query()
        } else {
            spec
        })
    }
}

#[wasm_bindgen]
#[allow(
    clippy::too_many_arguments,
    clippy::needless_pass_by_value,
    reason = "flat calls across the wasm boundary, whose arguments wasm-bindgen passes owned"
)]
impl Route {
    /// A route for `operation` under `policy` (as [`apply`](crate::apply) takes
    /// it), fingerprinting bodies with the schema version, JSON pointers and
    /// JSON profile given, and request lines with the query rules given
    /// (`ignoreQuery` leaves the query out, `ignoreQueryParams` the named
    /// parameters). Throws what `apply` or `fingerprint` would throw on the
    /// same options.
    #[wasm_bindgen(constructor)]
    #[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
    pub fn new(
        operation: String,
        policy: &JsValue,
        schema_version: u32,
        include: Vec<String>,
        exclude: Vec<String>,
        profile: &str,
        ignore_query: bool,
        ignore_query_params: Vec<String>,
    ) -> JsResult<Route> {
        let rules = Rules {
            schema_version,
            include,
            exclude,
            json: CanonicalizeOptions::default().profile(interop::profile(profile)?),
            ignore_query,
            ignore_query_params,
        };
        Ok(Route {
            specs: [
                rules.spec(ContentKind::Json)?,
                rules.spec(ContentKind::FormUrlEncoded)?,
                rules.spec(ContentKind::Raw)?,
            ],
            rules,
            operation,
            policy: interop::policy(policy)?,
        })
    }

    /// The log reference (16 hex characters) followed by the storage id (hex)
    /// of `key` under `tenant`: what `logRef` and `recordId` give, in one call.
    #[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
    pub fn locate(&self, tenant: &str, key: &str) -> JsResult<String> {
        let scope = Scope::new(tenant, &self.operation).map_err(interop::error)?;
        let key = IdempotencyKey::new(key).map_err(interop::error)?;
        let id = scope.record_id(&key);
        let mut out = id.log_ref().to_string();
        idemkit_core::hex::push_lower(&mut out, id.as_bytes());
        Ok(out)
    }

    /// The fingerprint of `body` sent as `contentType`, as bytes for
    /// [`claim`](Route::claim): 32 (scheme 1, the operation and body), or with
    /// `method` and `path` 64 (scheme 2, the request line counts: its value,
    /// then the same request's scheme-1 fingerprint). `query` is the text after
    /// `?`. Throws with a `json-*`, `form-*` or `fingerprint-*` code on a body
    /// the rules refuse.
    #[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
    pub fn fingerprint(
        &self,
        body: &[u8],
        content_type: &str,
        method: Option<String>,
        path: Option<String>,
        query: Option<String>,
    ) -> JsResult<Vec<u8>> {
        let spec = self.spec_for(content_type)?;
        let fp = match (method, path) {
            (None, None) => spec
                .fingerprint(&self.operation, body)
                .map(RequestFingerprint::body_only),
            (method, path) => {
                let line = RequestLine::new(
                    method.as_deref().unwrap_or_default(),
                    path.as_deref().unwrap_or_default(),
                    Some(query.as_deref().unwrap_or_default()),
                );
                spec.fingerprint_request(&self.operation, &line, body)
            }
        }
        .map_err(interop::error)?;
        let mut out = fp.value().as_bytes().to_vec();
        if fp.scheme() == SCHEME_REQUEST_LINE {
            out.extend_from_slice(fp.body_only_fingerprint().as_bytes());
        }
        Ok(out)
    }

    /// Decides the claim of a request whose [`fingerprint`](Route::fingerprint)
    /// is `fingerprint` on `existing` (the record's bytes as read, or
    /// `undefined`), for `owner` at `now`; a new record's tokens start above
    /// `tokenFloor`. Returns the address of the decision and its write
    /// [packed](crate::flat::Flat::into_shared), as
    /// [`interop::claim_decision`] lays it out (`claimDecided` in
    /// `wasm/js/idempotency.js` reads it).
    ///
    /// For the HTTP handler, with the record's `logRef` (as
    /// [`locate`](Route::locate) gave it): an outcome other than `execute`
    /// comes with core's HTTP reply to it (`{ status, headers, body }`, as
    /// `httpAnswer` gives it), so a replay or a refusal is answered without
    /// handing the outcome back across the boundary; a replay's `response` is
    /// then left out (the reply holds it).
    #[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
    pub fn claim(
        &self,
        existing: Option<Vec<u8>>,
        fingerprint: &[u8],
        owner: String,
        token_floor: u64,
        now: f64,
        log_ref: Option<String>,
    ) -> JsResult<usize> {
        let op = claim_op(fingerprint, owner, token_floor)?;
        let log_ref: Option<LogRef> = log_ref
            .map(|r| r.parse())
            .transpose()
            .map_err(|e| interop::error(interop::ArgumentError(format!("claim's logRef: {e}"))))?;
        let (_, decision) = crate::decision_on(existing.as_deref(), &op, &self.policy, now)?;
        let reply = match (&decision.answer, log_ref) {
            (Answer::Claim(outcome), Some(log_ref))
                if !matches!(outcome, ClaimOutcome::Execute { .. }) =>
            {
                interop::reply_answer(http::reply(Outcome::Claim(outcome.clone(), log_ref)))
            }
            _ => None,
        };
        // With a reply, a replay's response is in it.
        interop::claim_decision(&decision, reply.is_none(), reply.as_ref())
    }

    /// Decides the completion of the lease `token` on `existing` (the bytes it
    /// last wrote, or read since) at `now`, recording the response: `status`,
    /// the headers as `headerNames` (joined by `\n`) with their values back to
    /// back in `headerValues` (`headerLengths` long each), `body` (none when
    /// `undefined`) and `resourceRef`. Returns the address of the decision and
    /// its write [packed](crate::flat::Flat::into_shared), as
    /// [`interop::completion_decision`] lays it out: the written record's GC
    /// due time and, with `withView`, its view as
    /// [`decodeRecord`](crate::decode_record) gives it (the caller that
    /// returns one then decodes nothing).
    #[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
    pub fn complete(
        &self,
        existing: Vec<u8>,
        token: u64,
        status: u16,
        header_names: &str,
        header_values: &[u8],
        header_lengths: &[u32],
        body: Option<Vec<u8>>,
        resource_ref: Option<String>,
        now: f64,
        with_view: Option<bool>,
    ) -> JsResult<usize> {
        let op = Op::Complete {
            token: interop::token(token)?,
            response: StoredResponse {
                status,
                headers: headers(header_names, header_values, header_lengths).map_err(|what| {
                    interop::error(interop::ArgumentError(format!("response headers: {what}")))
                })?,
                body,
                resource_ref,
            },
        };
        let (_, decision) = crate::decision_on(Some(&existing), &op, &self.policy, now)?;
        Ok(interop::completion_decision(
            &decision,
            with_view == Some(true),
        ))
    }

    /// [`classify`](crate::classify) under this route's policy: how a finished
    /// attempt with `status` is recorded (`"store"`, `"release"` or `"unknown"`).
    #[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
    pub fn classify(
        &self,
        status: u16,
        nothing_dispatched: Option<bool>,
        dispatches_only_through_steps: Option<bool>,
        record: Option<Vec<u8>>,
    ) -> JsResult<String> {
        crate::classify_under(
            &self.policy,
            status,
            nothing_dispatched,
            dispatches_only_through_steps,
            record.as_deref(),
        )
    }

    /// [`apply`](crate::apply) under this route's policy.
    #[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
    pub fn apply(&self, existing: Option<Vec<u8>>, op: &JsValue, now: f64) -> JsResult<JsValue> {
        self.decide(existing.as_deref(), &interop::op(op)?, now)
    }
}

/// The claim of `owner` with `fingerprint` (32 or 64 bytes, as
/// [`Route::fingerprint`] gives them); a new record's tokens start above
/// `token_floor`.
fn claim_op(fingerprint: &[u8], owner: String, token_floor: u64) -> JsResult<Op> {
    let part = |range: core::ops::Range<usize>| {
        fingerprint
            .get(range)
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .map(Fingerprint::from_bytes)
    };
    let fingerprint = match (fingerprint.len(), part(0..32), part(32..64)) {
        (32, Some(value), _) => RequestFingerprint::body_only(value),
        (64, Some(value), Some(body_only)) => {
            RequestFingerprint::with_request_line(value, body_only)
        }
        (len, ..) => {
            return Err(interop::error(interop::ArgumentError(format!(
                "a claim's fingerprint is 32 or 64 bytes (Route.fingerprint), not {len}"
            ))));
        }
    };
    Ok(Op::Claim {
        request: ClaimRequest { fingerprint, owner },
        token_floor,
    })
}

/// The `(name, value)` pairs of [`Route::complete`]'s flat header arguments,
/// or what does not add up.
fn headers(
    names: &str,
    values: &[u8],
    lengths: &[u32],
) -> Result<Vec<(String, Vec<u8>)>, &'static str> {
    if names.is_empty() && lengths.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(lengths.len());
    let mut rest = values;
    let mut names = names.split('\n');
    for &length in lengths {
        let name = names.next().ok_or("fewer names than values")?;
        let (value, after) = usize::try_from(length)
            .ok()
            .and_then(|length| rest.split_at_checked(length))
            .ok_or("the values are shorter than their lengths")?;
        out.push((name.to_owned(), value.to_vec()));
        rest = after;
    }
    if names.next().is_some() {
        return Err("more names than values");
    }
    if !rest.is_empty() {
        return Err("the values are longer than their lengths");
    }
    Ok(out)
}

impl Route {
    /// The spec for bodies sent as `content_type`.
    fn spec_for(&self, content_type: &str) -> JsResult<Cow<'_, FingerprintSpec>> {
        let content = ContentKind::from_mime(content_type);
        match self.specs.iter().find(|spec| spec.content() == content) {
            Some(spec) => Ok(Cow::Borrowed(spec)),
            // A kind core maps content types to beyond the three kept.
            None => Ok(Cow::Owned(self.rules.spec(content)?)),
        }
    }

    fn decide(&self, existing: Option<&[u8]>, op: &Op, now: f64) -> JsResult<JsValue> {
        crate::decide(existing, op, &self.policy, now)
    }
}

#[cfg(test)]
mod tests {
    use super::headers;

    #[test]
    fn flat_headers_pair_up_and_must_add_up() {
        assert_eq!(headers("", b"", &[]), Ok(vec![]));
        assert_eq!(
            headers("content-type\nlocation", b"text/plain/p/1", &[10, 4]),
            Ok(vec![
                ("content-type".to_owned(), b"text/plain".to_vec()),
                ("location".to_owned(), b"/p/1".to_vec()),
            ])
        );
        // An empty value is a value.
        assert_eq!(
            headers("x-empty", b"", &[0]),
            Ok(vec![("x-empty".to_owned(), vec![])])
        );
        assert!(headers("a\nb", b"xy", &[2]).is_err());
        assert!(headers("a", b"xy", &[1, 1]).is_err());
        assert!(headers("a", b"xy", &[3]).is_err());
        assert!(headers("a", b"xyz", &[2]).is_err());
    }
}

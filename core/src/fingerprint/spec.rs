//! Computing fingerprints: [`FingerprintSpec`] → [`Fingerprint`].

use crate::prelude::*;

use core::fmt;

use super::Fingerprint;
use super::form::{FormError, decode_form};
use super::request_line::{
    QuerySelection, RequestFingerprint, RequestLine, request_line_fingerprint,
};
use crate::json::{
    CanonicalizeOptions, JsonError, JsonPointer, PointerError, Target, canonicalize_small,
    emit_into, plan, resolve,
};

/// The blake3 `derive_key` context of scheme 1
/// ([`SCHEME_BODY`](super::SCHEME_BODY)). Changing anything about the encoding
/// below means a new context string: stored fingerprints must never change meaning.
pub const CONTEXT: &str = "idemkit 2026-11 request fingerprint v1";

/// How a body is interpreted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ContentKind {
    /// JSON, canonicalized (RFC 8785, strict profile by default).
    Json,
    /// `application/x-www-form-urlencoded`: decoded pairs sorted by name.
    FormUrlEncoded,
    /// Anything else: the bytes as they are.
    Raw,
}

impl ContentKind {
    /// Maps a `Content-Type` value: `application/json` and any `*/*+json` are
    /// JSON, `application/x-www-form-urlencoded` is a form, anything else raw.
    /// Parameters (`; charset=utf-8`) and case are ignored.
    ///
    /// ```
    /// use idemkit_core::fingerprint::ContentKind;
    /// assert_eq!(ContentKind::from_mime("application/json; charset=utf-8"), ContentKind::Json);
    /// assert_eq!(ContentKind::from_mime("application/problem+json"), ContentKind::Json);
    /// assert_eq!(ContentKind::from_mime("Application/X-WWW-Form-Urlencoded"), ContentKind::FormUrlEncoded);
    /// assert_eq!(ContentKind::from_mime("text/plain"), ContentKind::Raw);
    /// ```
    #[must_use]
    pub fn from_mime(mime: &str) -> Self {
        let essence = mime.split(';').next().unwrap_or_default().trim();
        let essence = essence.to_ascii_lowercase();
        let Some((ty, subtype)) = essence.split_once('/') else {
            return ContentKind::Raw;
        };
        if ty.is_empty() || subtype.is_empty() {
            return ContentKind::Raw;
        }
        if essence == "application/json" || subtype.ends_with("+json") {
            ContentKind::Json
        } else if essence == "application/x-www-form-urlencoded" {
            ContentKind::FormUrlEncoded
        } else {
            ContentKind::Raw
        }
    }

    fn tag(self) -> &'static [u8] {
        match self {
            ContentKind::Json => b"json",
            ContentKind::FormUrlEncoded => b"form",
            ContentKind::Raw => b"raw",
        }
    }
}

/// A field-selection pointer was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpecError {
    /// The text is not an RFC 6901 pointer.
    Pointer {
        /// The pointer as given.
        pointer: String,
        /// Why.
        error: PointerError,
    },
    /// Excluding `""` would leave nothing to fingerprint.
    ExcludeRoot,
}

impl SpecError {
    /// A stable machine-readable code.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            SpecError::Pointer { error, .. } => error.code(),
            SpecError::ExcludeRoot => "spec-exclude-root",
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::Pointer { pointer, error } => write!(f, "{pointer:?}: {error}"),
            SpecError::ExcludeRoot => f.write_str("cannot exclude the whole document (\"\")"),
        }
    }
}

impl core::error::Error for SpecError {}

/// A body could not be fingerprinted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FingerprintError {
    /// The JSON body was rejected.
    Json(JsonError),
    /// The form body was rejected.
    Form(FormError),
    /// Include/exclude pointers were given but the content is not JSON; they
    /// would silently select nothing.
    SelectionNeedsJson,
}

impl FingerprintError {
    /// A stable machine-readable code.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            FingerprintError::Json(e) => e.code(),
            FingerprintError::Form(e) => e.code(),
            FingerprintError::SelectionNeedsJson => "fingerprint-selection-needs-json",
        }
    }
}

impl fmt::Display for FingerprintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FingerprintError::Json(e) => e.fmt(f),
            FingerprintError::Form(e) => e.fmt(f),
            FingerprintError::SelectionNeedsJson => {
                f.write_str("include/exclude pointers need a JSON body")
            }
        }
    }
}

impl core::error::Error for FingerprintError {}

impl From<JsonError> for FingerprintError {
    fn from(e: JsonError) -> Self {
        FingerprintError::Json(e)
    }
}

impl From<FormError> for FingerprintError {
    fn from(e: FormError) -> Self {
        FingerprintError::Form(e)
    }
}

/// What a fingerprint covers: the schema version of the operation's payload,
/// the content kind and, for JSON, which fields count.
///
/// The hash is blake3 in `derive_key` mode with [`CONTEXT`], over
/// length-framed fields (u64 little-endian length, then the bytes): operation,
/// schema version (u32 LE), content kind, then the body — the canonical JSON
/// (built once, then hashed), or for a selection each included pointer with an
/// absent/present tag and its canonical value, or the sorted form pairs, or
/// the raw bytes.
///
/// ```
/// use idemkit_core::fingerprint::{ContentKind, FingerprintSpec};
///
/// let spec = FingerprintSpec::new(ContentKind::Json)
///     .schema_version(2)
///     .exclude("/request_id")?;
/// let a = spec.fingerprint("appointments.create", br#"{"slot":"09:00","request_id":"r1"}"#)?;
/// let b = spec.fingerprint("appointments.create", br#"{ "request_id": "r2", "slot": "09:00" }"#)?;
/// assert_eq!(a, b); // order, whitespace and the excluded field don't matter
/// let c = spec.fingerprint("appointments.create", br#"{"slot":"10:00"}"#)?;
/// assert_ne!(a, c);
/// assert_eq!(a.to_string().len(), 64);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FingerprintSpec {
    schema_version: u32,
    content: ContentKind,
    include: Vec<JsonPointer>,
    exclude: Vec<JsonPointer>,
    json: CanonicalizeOptions,
    query: QuerySelection,
}

impl FingerprintSpec {
    /// A spec for `content` with schema version 1, the whole body, strict JSON.
    #[must_use]
    pub fn new(content: ContentKind) -> Self {
        FingerprintSpec {
            schema_version: 1,
            content,
            include: Vec::new(),
            exclude: Vec::new(),
            json: CanonicalizeOptions::default(),
            query: QuerySelection::All,
        }
    }

    /// Sets the payload schema version (bump it when the meaning of a field changes).
    #[must_use]
    pub fn schema_version(mut self, version: u32) -> Self {
        self.schema_version = version;
        self
    }

    /// Sets the JSON canonicalization options.
    #[must_use]
    pub fn json_options(mut self, opts: CanonicalizeOptions) -> Self {
        self.json = opts;
        self
    }

    /// Covers only the value at this RFC 6901 pointer (call again for more).
    /// A selected member that is absent fingerprints differently from `null`.
    ///
    /// # Errors
    ///
    /// [`SpecError::Pointer`] if the text is not a JSON Pointer.
    pub fn include(mut self, pointer: &str) -> Result<Self, SpecError> {
        self.include.push(parse_pointer(pointer)?);
        Ok(self)
    }

    /// Leaves out the member or element at this pointer (request ids,
    /// timestamps). An excluded array element is dropped from its array, so
    /// later elements move up. A pointer that selects nothing excludes nothing.
    /// Exclusions apply before inclusions: an included pointer that runs
    /// through an excluded member counts as absent.
    ///
    /// # Errors
    ///
    /// [`SpecError::Pointer`] for a malformed pointer, [`SpecError::ExcludeRoot`] for `""`.
    pub fn exclude(mut self, pointer: &str) -> Result<Self, SpecError> {
        let p = parse_pointer(pointer)?;
        if p.is_root() {
            return Err(SpecError::ExcludeRoot);
        }
        self.exclude.push(p);
        Ok(self)
    }

    /// Leaves the query parameter `name` out of
    /// [`fingerprint_request`](Self::fingerprint_request) (tracking parameters,
    /// cache busters): every pair with that decoded name is dropped before the
    /// pairs are sorted. Call again for more names.
    #[must_use]
    pub fn ignore_query_param(mut self, name: &str) -> Self {
        self.query.ignore(name);
        self
    }

    /// Leaves the whole query out of [`fingerprint_request`](Self::fingerprint_request):
    /// every query counts as none. The method and the path still count.
    #[must_use]
    pub fn ignore_query(mut self) -> Self {
        self.query = QuerySelection::Ignored;
        self
    }

    /// The content kind.
    #[must_use]
    pub fn content(&self) -> ContentKind {
        self.content
    }

    /// Fingerprints an HTTP request under scheme 2
    /// ([`SCHEME_REQUEST_LINE`](super::SCHEME_REQUEST_LINE)): the request line
    /// (method, concrete path, query pairs; see [`RequestLine`]) counts as well
    /// as the body. The result carries the scheme-1 fingerprint of the same
    /// request too, so a record written before the request line counted is
    /// still compared under its own scheme.
    ///
    /// ```
    /// use idemkit_core::fingerprint::{ContentKind, FingerprintSpec, RequestLine};
    ///
    /// let spec = FingerprintSpec::new(ContentKind::Json).ignore_query_param("utm_source");
    /// let a = spec.fingerprint_request("accounts.withdraw",
    ///     &RequestLine::from_target("POST", "/accounts/A/withdraw?currency=EUR&utm_source=mail"),
    ///     br#"{"amount":10}"#)?;
    /// let b = spec.fingerprint_request("accounts.withdraw",
    ///     &RequestLine::from_target("POST", "/accounts/B/withdraw?currency=EUR"),
    ///     br#"{"amount":10}"#)?;
    /// assert_ne!(a.value(), b.value()); // same key, same body, another account
    /// assert_eq!(a.body_only_fingerprint(), b.body_only_fingerprint());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`fingerprint`](Self::fingerprint): the body's errors. The request
    /// line itself is never refused.
    pub fn fingerprint_request(
        &self,
        operation: &str,
        line: &RequestLine<'_>,
        body: &[u8],
    ) -> Result<RequestFingerprint, FingerprintError> {
        let body_only = self.fingerprint(operation, body)?;
        let value = request_line_fingerprint(line, &self.query, &body_only);
        Ok(RequestFingerprint::with_request_line(value, body_only))
    }

    /// Fingerprints `body` sent to `operation` under scheme 1
    /// ([`SCHEME_BODY`](super::SCHEME_BODY)): the request line does not count.
    /// For HTTP requests use [`fingerprint_request`](Self::fingerprint_request).
    ///
    /// # Errors
    ///
    /// The body's [`JsonError`] or [`FormError`], or
    /// [`FingerprintError::SelectionNeedsJson`].
    pub fn fingerprint(
        &self,
        operation: &str,
        body: &[u8],
    ) -> Result<Fingerprint, FingerprintError> {
        let mut h = crate::digest::FINGERPRINT_V1.hasher();
        frame(&mut h, operation.as_bytes());
        frame(&mut h, &self.schema_version.to_le_bytes());
        frame(&mut h, self.content.tag());
        if self.content != ContentKind::Json
            && !(self.include.is_empty() && self.exclude.is_empty())
        {
            return Err(FingerprintError::SelectionNeedsJson);
        }
        match self.content {
            ContentKind::Json => self.json_body(&mut h, body)?,
            ContentKind::FormUrlEncoded => {
                let mut pairs = decode_form(body)?;
                // Stable: repeated names keep their order (`a=1&a=2` ≠ `a=2&a=1`).
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                frame(&mut h, &(pairs.len() as u64).to_le_bytes());
                for (name, value) in &pairs {
                    frame(&mut h, name.as_bytes());
                    frame(&mut h, value.as_bytes());
                }
            }
            ContentKind::Raw => frame(&mut h, body),
        }
        Ok(Fingerprint::from_bytes(*h.finalize().as_bytes()))
    }

    fn json_body(&self, h: &mut blake3::Hasher, body: &[u8]) -> Result<(), JsonError> {
        // The canonical bytes are built once and hashed in one call: the
        // length frame comes for free and blake3 gets large inputs (many tiny
        // updates cost more than the serialization itself).
        let mut canonical = Vec::with_capacity(body.len());
        // The whole body of a request (the usual rule) in one pass when it is
        // small; a selection, an error to report and a large body take the
        // two passes.
        if self.include.is_empty()
            && self.exclude.is_empty()
            && canonicalize_small(body, &self.json, &mut canonical)
        {
            frame(h, b"whole");
            frame(h, &canonical);
            return Ok(());
        }
        let doc = plan(body, &self.json)?;
        let mut excluded: Vec<usize> = Vec::new();
        for p in &self.exclude {
            // Nested exclusions need no ordering: leaving out an entry inside
            // a subtree that is left out anyway changes nothing.
            if let Some(Target::Entry { entry, .. }) = resolve(&doc, p, &[]) {
                excluded.push(entry);
            }
        }
        excluded.sort_unstable();
        excluded.dedup();
        let mut write_value = |h: &mut blake3::Hasher, node: usize| {
            canonical.clear();
            emit_into(&doc, node, &excluded, &mut canonical);
            frame(h, &canonical);
        };
        if self.include.is_empty() {
            frame(h, b"whole");
            write_value(h, doc.root);
            return Ok(());
        }
        let mut include = self.include.clone();
        include.sort();
        include.dedup();
        frame(h, b"select");
        frame(h, &(include.len() as u64).to_le_bytes());
        for p in &include {
            frame(h, p.to_string().as_bytes());
            match resolve(&doc, p, &excluded) {
                Some(target) => {
                    frame(h, b"present");
                    write_value(h, target.value());
                }
                None => frame(h, b"absent"),
            }
        }
        Ok(())
    }
}

fn parse_pointer(text: &str) -> Result<JsonPointer, SpecError> {
    text.parse().map_err(|error| SpecError::Pointer {
        pointer: text.to_owned(),
        error,
    })
}

fn frame(h: &mut blake3::Hasher, bytes: &[u8]) {
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

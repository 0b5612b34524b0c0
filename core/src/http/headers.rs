//! Which response headers are stored with an outcome and replayed.
//!
//! A stored response is handed to whoever retries with the key, so what it keeps
//! is an allow list ([`ReplayedHeaders`]), not a deny list: a header nobody named
//! (a session token in `X-Session-Token`, a per-request trace id) is answered once
//! and never stored. Credentials and cookies ([`NEVER_STORED_HEADERS`]) are never
//! stored, whatever a list says: the state machine drops them from every
//! completion too.

use core::fmt;

use crate::prelude::*;

use super::IDEMPOTENT_REPLAYED;

/// The response headers stored and replayed unless a route names its own list:
/// the representation (`content-type`, `content-encoding`, `content-language`,
/// `content-disposition`, `content-location`), where the result is (`location`,
/// `link`), caching (`cache-control`, `expires`, `etag`, `last-modified`,
/// `vary`), and what a stored 405 or 3xx needs (`allow`, `retry-after`).
pub const DEFAULT_REPLAYED_HEADERS: &[&str] = &[
    "content-type",
    "content-encoding",
    "content-language",
    "content-disposition",
    "content-location",
    "location",
    "link",
    "cache-control",
    "expires",
    "etag",
    "last-modified",
    "vary",
    "allow",
    "retry-after",
];

/// Headers that are never stored in a record, even when a list names them: a
/// session or a credential must never be handed to whoever retries with the key.
pub const NEVER_STORED_HEADERS: &[&str] = &[
    "set-cookie",
    "set-cookie2",
    "cookie",
    "authorization",
    "proxy-authorization",
];

/// Headers that describe one transmission (RFC 9110 §7.6.1 and the message
/// framing), which a replay makes anew: naming one in a list is refused.
const PER_TRANSMISSION_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "date",
    "age",
    IDEMPOTENT_REPLAYED,
];

/// Whether `name` is in [`DEFAULT_REPLAYED_HEADERS`] (ASCII case-insensitive).
#[must_use]
pub fn is_replayable_header(name: &str) -> bool {
    listed(DEFAULT_REPLAYED_HEADERS, name)
}

/// Whether `name` is a credential or cookie header ([`NEVER_STORED_HEADERS`]).
#[must_use]
pub fn is_never_stored_header(name: &str) -> bool {
    listed(NEVER_STORED_HEADERS, name)
}

fn listed(list: &[&str], name: &str) -> bool {
    list.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// The allow list of response headers a route stores and replays.
///
/// ```
/// use idemkit_core::http::ReplayedHeaders;
///
/// let defaults = ReplayedHeaders::default();
/// assert!(defaults.allows("Content-Type"));
/// assert!(!defaults.allows("x-session-token"));
///
/// // The defaults and one application header.
/// let more = ReplayedHeaders::default().with("X-Request-Cost")?;
/// assert!(more.allows("x-request-cost"));
///
/// // A cookie is never stored, whatever the list says.
/// assert!(ReplayedHeaders::new(["content-type", "set-cookie"]).is_err());
/// # Ok::<(), idemkit_core::http::ReplayedHeaderError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayedHeaders {
    /// Lowercase, each once.
    names: Vec<String>,
}

impl Default for ReplayedHeaders {
    /// [`DEFAULT_REPLAYED_HEADERS`].
    fn default() -> Self {
        ReplayedHeaders {
            names: DEFAULT_REPLAYED_HEADERS
                .iter()
                .map(|n| (*n).to_owned())
                .collect(),
        }
    }
}

impl ReplayedHeaders {
    /// Exactly `names` (instead of the defaults; name them too to keep them).
    /// Refused: a name that is not an HTTP field name, a credential or cookie
    /// header ([`NEVER_STORED_HEADERS`]), and a header of one transmission
    /// (`connection`, `content-length`, `date`, …).
    pub fn new<I, S>(names: I) -> Result<Self, ReplayedHeaderError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        names
            .into_iter()
            .try_fold(ReplayedHeaders { names: Vec::new() }, |list, name| {
                list.with(name.as_ref())
            })
    }

    /// This list and `name`, refused as [`new`](Self::new) refuses names.
    pub fn with(mut self, name: &str) -> Result<Self, ReplayedHeaderError> {
        let lower = name.to_ascii_lowercase();
        if lower.is_empty() || !lower.bytes().all(is_tchar) {
            return Err(ReplayedHeaderError::InvalidName { name: name.into() });
        }
        if is_never_stored_header(&lower) {
            return Err(ReplayedHeaderError::NeverStored { name: lower });
        }
        if listed(PER_TRANSMISSION_HEADERS, &lower) {
            return Err(ReplayedHeaderError::PerTransmission { name: lower });
        }
        if !self.names.contains(&lower) {
            self.names.push(lower);
        }
        Ok(self)
    }

    /// Whether a response header called `name` is stored and replayed (ASCII
    /// case-insensitive).
    #[must_use]
    pub fn allows(&self, name: &str) -> bool {
        self.names.iter().any(|n| n.eq_ignore_ascii_case(name))
    }

    /// The names, lowercase, in the order given.
    #[must_use]
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// `tchar` of RFC 9110 §5.6.2: what a field name is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Why a header name cannot be in a [`ReplayedHeaders`] list.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplayedHeaderError {
    /// Not an HTTP field name (RFC 9110 §5.1).
    InvalidName {
        /// The name as given.
        name: String,
    },
    /// A credential or cookie ([`NEVER_STORED_HEADERS`]): never stored.
    NeverStored {
        /// The name, lowercase.
        name: String,
    },
    /// A header of one transmission, which every answer makes anew.
    PerTransmission {
        /// The name, lowercase.
        name: String,
    },
}

impl fmt::Display for ReplayedHeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayedHeaderError::InvalidName { name } => {
                write!(f, "replayed header {name:?} is not an HTTP header name")
            }
            ReplayedHeaderError::NeverStored { name } => write!(
                f,
                "replayed header {name:?} carries a credential or a cookie, which is never stored \
                 (a retry by anyone holding the key would receive it)"
            ),
            ReplayedHeaderError::PerTransmission { name } => write!(
                f,
                "replayed header {name:?} describes one transmission and is made anew for every answer"
            ),
        }
    }
}

impl core::error::Error for ReplayedHeaderError {}

impl ReplayedHeaderError {
    /// A stable name for the refusal (`replayed-header-never-stored`, …).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            ReplayedHeaderError::InvalidName { .. } => "replayed-header-invalid-name",
            ReplayedHeaderError::NeverStored { .. } => "replayed-header-never-stored",
            ReplayedHeaderError::PerTransmission { .. } => "replayed-header-per-transmission",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_keep_what_a_replay_needs_and_nothing_else() {
        for kept in ["content-type", "Location", "ETag", "cache-control", "vary"] {
            assert!(is_replayable_header(kept), "{kept}");
        }
        for dropped in [
            "Set-Cookie",
            "x-session-token",
            "x-request-id",
            "connection",
            "Transfer-Encoding",
            "date",
            "content-length",
            IDEMPOTENT_REPLAYED,
        ] {
            assert!(!is_replayable_header(dropped), "{dropped}");
            assert!(!ReplayedHeaders::default().allows(dropped), "{dropped}");
        }
    }

    #[test]
    fn a_list_replaces_the_defaults_and_refuses_what_is_never_stored() {
        let list = ReplayedHeaders::new(["X-Cost", "content-type", "x-cost"]).unwrap();
        assert_eq!(list.names(), ["x-cost", "content-type"]);
        assert!(list.allows("X-COST"));
        assert!(!list.allows("location"));
        for never in ["Set-Cookie", "set-cookie2", "cookie", "Authorization"] {
            assert_eq!(
                ReplayedHeaders::new([never]).unwrap_err().code(),
                "replayed-header-never-stored",
                "{never}"
            );
        }
        assert_eq!(
            ReplayedHeaders::default()
                .with("content-length")
                .unwrap_err()
                .code(),
            "replayed-header-per-transmission"
        );
        for bad in ["", "x y", "x:y", "é"] {
            assert_eq!(
                ReplayedHeaders::new([bad]).unwrap_err().code(),
                "replayed-header-invalid-name",
                "{bad:?}"
            );
        }
        assert!(
            ReplayedHeaders::new(Vec::<&str>::new())
                .unwrap()
                .names()
                .is_empty()
        );
    }
}

//! Console sessions: a token login gives the browser an `HttpOnly`,
//! `SameSite=Strict` cookie naming a session, and the page a CSRF token that
//! every change must carry in `X-CSRF-Token`. Sessions live in memory: a
//! restart logs everyone out, which is the safe direction.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::{HeaderMap, header};

/// The cookie that names a session.
pub(crate) const COOKIE: &str = "idemkit_console";
/// How long a session lasts after login, used or not.
pub(crate) const LIFETIME: Duration = Duration::from_secs(8 * 60 * 60);
/// The most sessions kept: a login beyond it ends the oldest.
const MAX_SESSIONS: usize = 1_024;

/// One logged-in operator.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    /// The name given at login, for the audit log.
    pub(crate) operator: String,
    /// What every change of this session must send in `X-CSRF-Token`.
    pub(crate) csrf: String,
    started: Instant,
}

#[derive(Default)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// Starts a session for `operator`; returns its id (the cookie's value).
    pub(crate) fn start(&self, operator: &str) -> Result<(String, Session), String> {
        let session = Session {
            operator: operator.to_owned(),
            csrf: random_token()?,
            started: Instant::now(),
        };
        let id = random_token()?;
        let mut by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        by_id.retain(|_, s| s.started.elapsed() < LIFETIME);
        if by_id.len() >= MAX_SESSIONS
            && let Some(oldest) = by_id
                .iter()
                .min_by_key(|(_, s)| s.started)
                .map(|(id, _)| id.clone())
        {
            by_id.remove(&oldest);
        }
        by_id.insert(id.clone(), session.clone());
        Ok((id, session))
    }

    /// The live session the request's cookie names.
    pub(crate) fn of(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        by_id
            .get(id)
            .filter(|s| s.started.elapsed() < LIFETIME)
            .cloned()
    }

    /// Ends the session the request's cookie names, if any.
    pub(crate) fn end(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, COOKIE) {
            let mut by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
            by_id.remove(id);
        }
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// 32 random bytes in hex: a session id or a CSRF token.
fn random_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a session: {e}"))?;
    Ok(idemkit_core::hex::lower(&bytes))
}

/// Equal, compared in full whatever the inputs, so the time taken does not
/// reveal how much of a secret a guess got right.
pub(crate) fn same_secret(given: &str, secret: &str) -> bool {
    given.len() == secret.len()
        && given
            .bytes()
            .zip(secret.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// The `Set-Cookie` value that starts the session `id`: never readable by
/// scripts, never sent by another site's request, only to the console, and,
/// on a console served over TLS (`secure`), never sent without it.
pub(crate) fn set_cookie(id: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{}",
        LIFETIME.as_secs(),
        secure_attribute(secure)
    )
}

/// The `Set-Cookie` value that ends it in the browser.
pub(crate) fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0{}",
        secure_attribute(secure)
    )
}

fn secure_attribute(secure: bool) -> &'static str {
    if secure { "; Secure" } else { "" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, value.parse().unwrap());
        headers
    }

    #[test]
    fn a_session_is_found_by_its_cookie_among_others_and_ends_on_logout() {
        let sessions = Sessions::default();
        let (id, started) = sessions.start("Dana").unwrap();
        let headers = with_cookie(&format!("theme=dark; {COOKIE}={id}; other=1"));
        let found = sessions.of(&headers).unwrap();
        assert_eq!(
            (found.operator.as_str(), found.csrf),
            ("Dana", started.csrf)
        );
        sessions.end(&headers);
        assert!(sessions.of(&headers).is_none());
    }

    #[test]
    fn an_unknown_or_missing_cookie_names_no_session() {
        let sessions = Sessions::default();
        sessions.start("Dana").unwrap();
        assert!(
            sessions
                .of(&with_cookie(&format!("{COOKIE}=forged")))
                .is_none()
        );
        assert!(sessions.of(&HeaderMap::new()).is_none());
    }

    #[test]
    fn secrets_compare_equal_only_when_identical() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abd", "abc"));
        assert!(!same_secret("ab", "abc"));
    }
}

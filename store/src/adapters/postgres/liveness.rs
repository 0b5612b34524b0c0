//! How a connection notices that the network between it and the server went
//! silent.
//!
//! A store call waits on its connection's socket. When the network drops
//! packets without a word (a partition, a database that failed over to another
//! address, a firewall that forgot the flow), nothing tells the socket: TCP
//! resends an unacknowledged request for about 15 minutes (Linux's
//! `tcp_retries2`) before it gives up, and a connection whose request was
//! acknowledged waits for its answer until the keepalives find the server gone,
//! 2 hours idle by default. Every request that needs the store waits as long.
//!
//! [`apply`] bounds both by one duration, `silence`
//! ([`PgOptions::dead_connection_timeout`](super::PgOptions::dead_connection_timeout)):
//!
//! - `TCP_USER_TIMEOUT` of `silence` (Linux): data left unacknowledged that
//!   long closes the connection;
//! - keepalive probes after `silence / 2` without traffic, then every
//!   `silence / 4` (at least 1 s each, the socket's unit). On Linux the user
//!   timeout also ends a connection whose probes go unanswered for `silence`;
//!   elsewhere three unanswered probes do.
//!
//! The server's host acknowledges data and answers probes however long a
//! statement runs, so a slow statement is never cut short: only silence is.
//! What the URL sets itself (`tcp_user_timeout`, in libpq's milliseconds, or
//! any of `keepalives`, `keepalives_idle`, `keepalives_interval`,
//! `keepalives_retries`) is kept.

use std::time::Duration;

use super::url::Split;

/// The URL parameters that set the keepalives: a URL naming any of them keeps
/// the driver's keepalives as it set them.
const KEEPALIVE_PARAMETERS: [&str; 4] = [
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
];

/// Unanswered probes that end a connection where `TCP_USER_TIMEOUT` does not
/// exist.
const PROBES: u32 = 3;

/// Sets `config`'s user timeout and keepalives from `silence`, leaving alone
/// what `url` set. A zero `silence` leaves the URL's values and the system's
/// defaults.
pub(crate) fn apply(config: &mut postgres::Config, silence: Duration, url: &Split) {
    // The URL's own user timeout wins; its 0 means the system's default.
    match url.tcp_user_timeout {
        Some(timeout) if !timeout.is_zero() => {
            config.tcp_user_timeout(timeout);
        }
        Some(_) => {}
        None if !silence.is_zero() => {
            config.tcp_user_timeout(silence);
        }
        None => {}
    }
    let named = |parameter: &str| url.named.iter().any(|n| n == parameter);
    if !silence.is_zero() && !KEEPALIVE_PARAMETERS.iter().any(|p| named(p)) {
        let at_least_a_second = |d: Duration| d.max(Duration::from_secs(1));
        config
            .keepalives(true)
            .keepalives_idle(at_least_a_second(silence / 2))
            .keepalives_interval(at_least_a_second(silence / 4))
            .keepalives_retries(PROBES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    /// `url`'s driver configuration once `silence` is applied.
    fn applied(url: &str, silence: Duration) -> postgres::Config {
        let url = super::super::url::split(url).unwrap();
        let mut config = postgres::Config::from_str(&url.driver_url).unwrap();
        apply(&mut config, silence, &url);
        config
    }

    #[test]
    fn a_url_without_its_own_timeouts_gets_ones_derived_from_the_silence() {
        let config = applied("host=db", Duration::from_secs(10));
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(10))
        );
        assert!(config.get_keepalives());
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(5));
        assert_eq!(
            config.get_keepalives_interval(),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(config.get_keepalives_retries(), Some(PROBES));
    }

    #[test]
    fn probe_intervals_never_fall_below_the_sockets_one_second_unit() {
        let config = applied("host=db", Duration::from_millis(1500));
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_millis(1500))
        );
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(1));
        assert_eq!(
            config.get_keepalives_interval(),
            Some(Duration::from_secs(1))
        );
    }

    #[test]
    fn what_the_url_sets_is_kept() {
        let config = applied(
            "postgres://db/app?tcp_user_timeout=60000&keepalives_idle=7200",
            Duration::from_secs(10),
        );
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(60))
        );
        // 7200 s is also the driver's default: only the name tells it was set.
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(7200));
        assert_eq!(config.get_keepalives_interval(), None);
        assert_eq!(config.get_keepalives_retries(), None);

        let config = applied("host=db keepalives=0", Duration::from_secs(10));
        assert!(!config.get_keepalives());
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(10))
        );

        // 0, as in libpq: the system's default, whatever the silence.
        let config = applied("host=db tcp_user_timeout=0", Duration::from_secs(10));
        assert_eq!(config.get_tcp_user_timeout(), None);
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(5));
    }

    #[test]
    fn a_zero_silence_leaves_the_url_and_the_system_defaults() {
        let config = applied("host=db", Duration::ZERO);
        assert_eq!(config.get_tcp_user_timeout(), None);
        assert_eq!(config.get_keepalives_interval(), None);
        assert_eq!(
            config.get_keepalives_idle(),
            Duration::from_secs(2 * 60 * 60)
        );
        let config = applied("host=db tcp_user_timeout=1500", Duration::ZERO);
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_millis(1500))
        );
    }
}

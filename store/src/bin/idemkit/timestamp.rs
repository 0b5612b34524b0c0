//! Timestamps in the JSON lines the binary writes (the proxy's access log, an
//! unknown tool call's `since`): RFC 3339, UTC, milliseconds.

use idemkit::core::UnixMillis;

/// `ms` as an RFC 3339 UTC timestamp with milliseconds.
pub(crate) fn rfc3339(at: UnixMillis) -> String {
    let ms = at.as_millis();
    let days = i64::try_from(ms / 86_400_000).unwrap_or(i64::MAX);
    let in_day = ms % 86_400_000;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(
            rfc3339(UnixMillis::from_millis(0)),
            "1970-01-01T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339(UnixMillis::from_millis(1_798_761_600_123)),
            "2027-01-01T00:00:00.123Z"
        );
        assert_eq!(
            rfc3339(UnixMillis::from_millis(951_782_400_000)),
            "2000-02-29T00:00:00.000Z"
        );
    }
}

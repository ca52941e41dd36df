//! Durations as Kubernetes users write them (`10s`, `5m`, `1h30m`, `500ms`): the Go
//! `time.ParseDuration` subset of non-negative whole numbers with units h, m, s, ms.

use std::time::Duration;

/// Parses `1h30m`, `10s`, `500ms`; rejects empty, signed, fractional or unit-less input.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("{text:?} is not a duration like 10s, 5m, 1h30m or 500ms");
    if text.is_empty() {
        return Err(invalid());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(invalid());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let part = match &rest[..unit_len] {
            "h" => Duration::from_secs(number.saturating_mul(3600)),
            "m" => Duration::from_secs(number.saturating_mul(60)),
            "s" => Duration::from_secs(number),
            "ms" => Duration::from_millis(number),
            _ => return Err(invalid()),
        };
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_style_durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m500ms"), Ok(Duration::from_millis(60_500)));
    }

    #[test]
    fn rejects_what_go_would_not_mean() {
        for bad in ["", "10", "s", "-5s", "1.5s", "10 s", "5d", "1h-30m"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} must be rejected");
        }
    }
}

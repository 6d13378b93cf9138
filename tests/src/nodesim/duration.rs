//! Durations written the Go way (`500ms`, `2s`, `1m30s`, `1.5s`), as milliseconds.
//!
//! Not humantime (which the plugin's flags use): it takes no fractions (`1.5s`), which
//! Go's `time.ParseDuration` and the simulator's flags do.

use thiserror::Error;

/// A duration string that could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid duration {input:?}: {why} (examples: 0, 500ms, 2s, 1m30s, 1.5s)")]
pub struct DurationError {
    input: String,
    why: &'static str,
}

/// Parses a non-negative duration into milliseconds. Units: `ms`, `s`, `m`, `h`; a bare
/// `0` is allowed; fractions are allowed (`1.5s`); several parts add up (`1m30s`).
pub fn parse_millis(input: &str) -> Result<i64, DurationError> {
    let err = |why| DurationError {
        input: input.to_owned(),
        why,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    if s == "0" {
        return Ok(0);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| err("missing unit"))?;
        if num_len == 0 {
            return Err(err("expected a number"));
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err("bad number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 1.0,
            "s" => 1_000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            _ => return Err(err("unknown unit")),
        };
        rest = &rest[unit_len..];
        total += value * factor;
    }
    if !total.is_finite() || total > 1e15 {
        return Err(err("too large"));
    }
    Ok(total.round() as i64)
}

/// A clap value parser for duration flags.
pub fn parse_flag(input: &str) -> Result<i64, String> {
    parse_millis(input).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, Option<i64>)] = &[
            ("0", Some(0)),
            ("500ms", Some(500)),
            ("2s", Some(2_000)),
            ("1.5s", Some(1_500)),
            ("1m30s", Some(90_000)),
            ("1h", Some(3_600_000)),
            (" 10s ", Some(10_000)),
            ("", None),
            ("10", None),
            ("s", None),
            ("5x", None),
            ("-1s", None),
            ("1..2s", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_millis(input).ok(), *want, "input {input:?}");
        }
    }
}

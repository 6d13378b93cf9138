//! Kubernetes resource quantities (`"500m"`, `"1.5Gi"`, `"2e3"`), as far as the planner
//! compares them: in-place resize eligibility (QoS class) and resize completion.

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The value of a quantity in thousandths of its unit, rounded up (like Kubernetes'
/// `MilliValue`). `None` when the text is not a quantity or does not fit.
pub fn millis(q: &str) -> Option<i128> {
    let q = q.trim();
    let (sign, rest) = match q.as_bytes().first()? {
        b'-' => (-1, &q[1..]),
        b'+' => (1, &q[1..]),
        _ => (1, q),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    if digits.len() > 30 {
        return None;
    }
    let mantissa: i128 = digits.parse().ok()?;
    let frac_digits = i32::try_from(frac_part.len()).ok()?;
    // value = mantissa * 2^binary * 10^(decimal - frac_digits); millis = value * 10^3.
    let (binary, decimal): (u32, i32) = match suffix {
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "" => (0, 0),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        exp if exp.starts_with(['e', 'E']) => (0, exp[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let exponent = decimal + 3 - frac_digits;
    let mut numerator = mantissa.checked_mul(1i128.checked_shl(binary)?)?;
    let mut denominator: i128 = 1;
    if exponent >= 0 {
        numerator = numerator.checked_mul(10i128.checked_pow(exponent.unsigned_abs())?)?;
    } else {
        denominator = 10i128.checked_pow(exponent.unsigned_abs())?;
    }
    let rounded_up = numerator / denominator + i128::from(numerator % denominator != 0);
    Some(sign * rounded_up)
}

/// Compares two quantities by value; unparsable ones compare by text (and never equal a
/// parsable one), so that a malformed quantity is never taken for an unchanged one.
pub fn cmp(a: &Quantity, b: &Quantity) -> Ordering {
    match (millis(&a.0), millis(&b.0)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.0.cmp(&b.0),
    }
}

/// Same value.
pub fn equal(a: &Quantity, b: &Quantity) -> bool {
    cmp(a, b) == Ordering::Equal
}

/// Strictly positive (what Kubernetes counts when deriving the QoS class).
pub fn is_positive(q: &Quantity) -> bool {
    millis(&q.0).is_some_and(|m| m > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_binary_and_exponent_suffixes_scale_to_millis() {
        let cases = [
            ("1", Some(1000)),
            ("500m", Some(500)),
            ("0.5", Some(500)),
            (".5", Some(500)),
            ("1.5k", Some(1_500_000)),
            ("1Ki", Some(1_024_000)),
            ("1Gi", Some(1_073_741_824_000)),
            ("2e3", Some(2_000_000)),
            ("1E-3", Some(1)),
            ("1n", Some(1)), // rounded up like MilliValue
            ("-250m", Some(-250)),
            ("+2", Some(2000)),
            ("", None),
            ("abc", None),
            ("1Xi", None),
            ("1.2.3", None),
        ];
        for (text, want) in cases {
            assert_eq!(millis(text), want, "{text}");
        }
    }

    #[test]
    fn equal_quantities_in_different_notations_compare_equal() {
        let q = |s: &str| Quantity(s.to_owned());
        assert!(equal(&q("1"), &q("1000m")));
        assert!(equal(&q("1Gi"), &q("1024Mi")));
        assert!(!equal(&q("1G"), &q("1Gi")));
        assert!(!equal(&q("bogus"), &q("1")));
        assert!(is_positive(&q("1m")));
        assert!(!is_positive(&q("0")));
        assert_eq!(cmp(&q("2"), &q("1500m")), Ordering::Greater);
    }
}
